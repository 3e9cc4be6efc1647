package secrets_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/flechtwerk/flechtwerk/secrets"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// A field sealed under a scope opens for that scope only.
func ExampleSealed() {
	k, err := secrets.Generate("2026-01", secrets.Oct)
	if err != nil {
		panic(err)
	}
	apiKey := secrets.Sealed(k, transformer.JSON[string](), secrets.Scope("api_key"))
	b, _ := apiKey.Encode("s3cret")
	fmt.Println(strings.HasPrefix(string(b), `"flenc:jwe:`))
	v, _ := apiKey.Decode(b)
	fmt.Println(v)

	dbPassword := secrets.Sealed(k, transformer.JSON[string](), secrets.Scope("db"))
	_, err = dbPassword.Decode(b)
	fmt.Println(errors.Is(err, secrets.ErrScope))
	_, err = apiKey.Decode([]byte(`"pasted in plaintext"`))
	fmt.Println(errors.Is(err, secrets.ErrPlaintext))
	// Output:
	// true
	// s3cret
	// true
	// true
}

// After a rotation the new key seals and the old one still opens.
func ExampleKeyring_Rotate() {
	k, _ := secrets.Generate("2026-01", secrets.Oct)
	old, _ := k.Seal([]byte(`"v"`), "")
	k, _ = k.Rotate("2026-07", secrets.Oct)
	fresh, _ := k.Seal([]byte(`"v"`), "")
	oldKid, _ := secrets.KidOf(old)
	freshKid, _ := secrets.KidOf(fresh)
	p, err := k.Open(old, "")
	fmt.Println(oldKid, freshKid, string(p), err)

	k, _ = k.Remove("2026-01")
	_, err = k.Open(old, "")
	fmt.Println(errors.Is(err, secrets.ErrUnknownKid))
	// Output:
	// 2026-01 2026-07 "v" <nil>
	// true
}
