package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/flechtwerk/flechtwerk/secrets"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// secretFlags are the flags of the keyring and value commands.
type secretFlags struct {
	keyring      string
	passwordFile string
	passwordEnv  string
}

func newSecretFlags(name string, sf *secretFlags, withKeyring bool) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if withKeyring {
		fs.StringVar(&sf.keyring, "keyring", "", "keyring file")
	}
	fs.StringVar(&sf.passwordFile, "password-file", "", "file holding the keyring password")
	fs.StringVar(&sf.passwordEnv, "password-env", "", "environment variable holding the keyring password")
	return fs
}

// password returns the keyring password from --password-file (one
// trailing newline dropped) or --password-env; nil when neither is set.
func (sf *secretFlags) password(env Env) ([]byte, error) {
	switch {
	case sf.passwordFile != "" && sf.passwordEnv != "":
		return nil, usagef("give --password-file or --password-env, not both")
	case sf.passwordFile != "":
		b, err := os.ReadFile(sf.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("read password file: %w", err)
		}
		return bytes.TrimSuffix(b, []byte("\n")), nil
	case sf.passwordEnv != "":
		v := env.Getenv(sf.passwordEnv)
		if v == "" {
			return nil, fmt.Errorf("environment variable %s is empty or unset", sf.passwordEnv)
		}
		return []byte(v), nil
	}
	return nil, nil
}

// openKeyring loads path and returns the keyring and the password that
// opened it (nil for a plain file).
func (sf *secretFlags) openKeyring(path string, env Env) (*secrets.Keyring, []byte, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read keyring: %w", err)
	}
	if !secrets.IsProtected(doc) {
		k, err := secrets.Parse(doc)
		return k, nil, err
	}
	pw, err := sf.password(env)
	if err != nil {
		return nil, nil, err
	}
	if pw == nil {
		return nil, nil, fmt.Errorf("%s is password-protected: pass --password-file or --password-env", path)
	}
	k, err := secrets.Load(doc, pw)
	return k, pw, err
}

// saveKeyring writes k to path atomically with mode 0600, protected again
// when password is set: never silently plain.
func saveKeyring(path string, k *secrets.Keyring, password []byte) error {
	doc := k.Document()
	if password != nil {
		p, err := k.Protect(password)
		if err != nil {
			return err
		}
		doc = append(p, '\n')
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write keyring: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write keyring: %w", err)
	}
	if _, err := tmp.Write(doc); err != nil {
		tmp.Close()
		return fmt.Errorf("write keyring: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write keyring: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write keyring: %w", err)
	}
	return nil
}

func keyringCmd(args []string, env Env) error {
	if len(args) == 0 {
		return usagef("keyring: want create, add, rotate, primary, signing, remove, protect, show or export")
	}
	sub, args := args[0], args[1:]
	var sf secretFlags
	fs := newSecretFlags("keyring "+sub, &sf, false)
	var kid, kind string
	var scopes, primaryFor, signingFor listFlag
	var primary, protect, force bool
	var scope string
	switch sub {
	case "create", "add", "rotate":
		fs.StringVar(&kid, "kid", "", "the new key's id")
		fs.StringVar(&kind, "type", "oct", "oct, x25519 or ed25519")
		fs.Var(&scopes, "scope", "bind the key to this scope (repeatable)")
	}
	switch sub {
	case "create":
		fs.BoolVar(&protect, "protect", false, "write the keyring password-protected")
		fs.BoolVar(&force, "force", false, "overwrite an existing file")
	case "add":
		fs.BoolVar(&primary, "primary", false, "make the key the primary sealing key")
		fs.Var(&primaryFor, "primary-for", "make the key the sealing key of this scope (repeatable)")
		fs.Var(&signingFor, "signing-for", "make the key the signing key of this scope (repeatable)")
	case "primary", "signing":
		fs.StringVar(&scope, "scope", "", "the scope")
	}
	want, names := 1, "KEYRING"
	switch sub {
	case "primary", "signing", "remove", "export":
		want, names = 2, "KEYRING KID"
	case "show", "protect":
	case "create", "add", "rotate":
	default:
		return usagef("keyring: unknown subcommand %q", sub)
	}
	pos, err := parse(fs, args, want, names)
	if err != nil {
		return err
	}
	path := pos[0]
	if (sub == "create" || sub == "add" || sub == "rotate") && kid == "" {
		return usagef("keyring %s: --kid is required", sub)
	}
	if sub == "create" {
		if _, err := os.Stat(path); err == nil && !force {
			return fmt.Errorf("%s already exists: pass --force to overwrite it", path)
		}
		var pw []byte
		if protect {
			if pw, err = sf.password(env); err != nil {
				return err
			}
			if pw == nil {
				return usagef("keyring create --protect: pass --password-file or --password-env")
			}
		}
		k, err := secrets.Generate(kid, secrets.Kind(kind), scopes...)
		if err != nil {
			return err
		}
		return saveKeyring(path, k, pw)
	}
	k, pw, err := sf.openKeyring(path, env)
	if err != nil {
		return err
	}
	switch sub {
	case "add":
		if k, err = k.Add(kid, secrets.Kind(kind), scopes...); err != nil {
			return err
		}
		if primary {
			if k, err = k.SetPrimary(kid); err != nil {
				return err
			}
		}
		for _, s := range primaryFor {
			if k, err = k.SetScopePrimary(s, kid); err != nil {
				return err
			}
		}
		for _, s := range signingFor {
			if k, err = k.SetSigning(s, kid); err != nil {
				return err
			}
		}
	case "rotate":
		k, err = k.Rotate(kid, secrets.Kind(kind), scopes...)
	case "primary":
		if scope != "" {
			k, err = k.SetScopePrimary(scope, pos[1])
		} else {
			k, err = k.SetPrimary(pos[1])
		}
	case "signing":
		if scope == "" {
			return usagef("keyring signing: --scope is required")
		}
		k, err = k.SetSigning(scope, pos[1])
	case "remove":
		k, err = k.Remove(pos[1])
	case "protect":
		if pw != nil {
			return fmt.Errorf("%s is already password-protected", path)
		}
		if pw, err = sf.password(env); err != nil {
			return err
		}
		if pw == nil {
			return usagef("keyring protect: pass --password-file or --password-env")
		}
	case "show":
		return showKeyring(env.Stdout, k)
	case "export":
		jwk, err := k.PublicJWK(pos[1])
		if err != nil {
			return err
		}
		_, err = env.Stdout.Write(jwk)
		return err
	}
	if err != nil {
		return err
	}
	return saveKeyring(path, k, pw)
}

// showKeyring lists the entries and roles, never key material.
func showKeyring(w io.Writer, k *secrets.Keyring) error {
	tw := table(w)
	fmt.Fprintln(tw, "KID\tKIND\tPRIVATE\tSCOPES\tROLE")
	for _, kid := range k.Kids() {
		kind, _ := k.KindOf(kid)
		role := ""
		if kid == k.Primary() {
			role = "primary"
		}
		scopes := strings.Join(k.Scopes(kid), ",")
		if scopes == "" {
			scopes = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%s\n", kid, kind, k.HasPrivate(kid), scopes, role)
	}
	return tw.Flush()
}

// valueCmd runs seal, open, sign, verify and reseal. A value to seal or
// sign is read from stdin, a file (--in) or an environment variable
// (--env), never from the command line; a token may also be an argument.
func valueCmd(op string, args []string, env Env) error {
	var sf secretFlags
	fs := newSecretFlags(op, &sf, true)
	var scope, in, envVar string
	var str bool
	fs.StringVar(&scope, "scope", "", "the scope")
	fs.StringVar(&in, "in", "", "read the input from this file")
	fs.StringVar(&envVar, "env", "", "read the input from this environment variable")
	fs.BoolVar(&str, "string", false, "the value is a raw string, not JSON")
	var pos []string
	var err error
	switch op {
	case "seal", "sign":
		pos, err = parse(fs, args, 0, "no arguments (the value comes from stdin, --in or --env)")
	default:
		if pos, err = parse(fs, args, 1, "TOKEN"); err != nil {
			pos, err = parse(fs, args, 0, "TOKEN or none (stdin, --in or --env)")
		}
	}
	if err != nil {
		return err
	}
	if sf.keyring == "" {
		return usagef("%s: --keyring is required", op)
	}
	var input []byte
	switch {
	case len(pos) == 1:
		input = []byte(pos[0])
	case in != "" && envVar != "":
		return usagef("%s: give --in or --env, not both", op)
	case in != "":
		if input, err = os.ReadFile(in); err != nil {
			return fmt.Errorf("read input: %w", err)
		}
	case envVar != "":
		input = []byte(env.Getenv(envVar))
	default:
		if input, err = io.ReadAll(env.Stdin); err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
	}
	input = bytes.TrimSuffix(input, []byte("\n"))
	k, _, err := sf.openKeyring(sf.keyring, env)
	if err != nil {
		return err
	}
	var out []byte
	switch op {
	case "seal", "sign":
		payload := input
		if str {
			payload, _ = json.Marshal(string(input))
		} else if !json.Valid(input) {
			return errors.New("the value is not valid JSON: pass --string for a plain string")
		}
		var tok string
		if op == "seal" {
			tok, err = k.Seal(payload, scope)
		} else {
			tok, err = k.Sign(payload, scope)
		}
		out = []byte(tok)
	case "reseal":
		var tok string
		tok, err = k.Reseal(string(input), scope)
		out = []byte(tok)
	default:
		if op == "open" {
			out, err = k.Open(string(input), scope)
		} else {
			out, err = k.Verify(string(input), scope)
		}
		if err == nil && str {
			var s string
			if json.Unmarshal(out, &s) != nil {
				return errors.New("the value is not a JSON string: drop --string to print it as JSON")
			}
			out = []byte(s)
		}
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(env.Stdout, "%s\n", out)
	return err
}
