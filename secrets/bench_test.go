package secrets_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/secrets"
	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

var payload = []byte(`"customer-token-0123456789abcdef"`)

// BenchmarkToken measures one seal, open, sign and verify of a 32-byte
// value per key kind: ops/s is 1e9 / ns/op. Compare within one run.
func BenchmarkToken(b *testing.B) {
	k := testKeyring(b)
	for _, tc := range []struct{ name, scope string }{{"oct", ""}, {"x25519", "api_key"}} {
		tok, err := k.Seal(payload, tc.scope)
		require.NoError(b, err)
		b.Run("seal/"+tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := k.Seal(payload, tc.scope); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("open/"+tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := k.Open(tok, tc.scope); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	sig, err := k.Sign(payload, "api_key")
	require.NoError(b, err)
	b.Run("sign/ed25519", func(b *testing.B) {
		for b.Loop() {
			if _, err := k.Sign(payload, "api_key"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("verify/ed25519", func(b *testing.B) {
		for b.Loop() {
			if _, err := k.Verify(sig, "api_key"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// custState is a transformer's state holding one secret field.
type custState struct {
	N     int             `json:"n"`
	Token json.RawMessage `json:"token"`
}

// BenchmarkTransformerState runs batches of 500 records over 100 keys
// through a transformer whose state holds one field: plain (a JSON
// string) or sealed (a Sealed field, oct or X25519). Each record reads
// the field (an open when sealed) and writes the state back; the first
// record of a key seals it. ns/record is the figure to compare: the
// ratio sealed/plain is the cost of the encrypted field.
func BenchmarkTransformerState(b *testing.B) {
	k := testKeyring(b)
	fields := []struct {
		name  string
		codec transformer.Codec[string]
	}{
		{"plain", transformer.JSON[string]()},
		{"sealed-oct", secrets.Sealed(k, transformer.JSON[string]())},
		{"sealed-x25519", secrets.Sealed(k, transformer.JSON[string](), secrets.Scope("api_key"))},
	}
	const records, keys = 500, 100
	inputs := make([]transformertest.Input, records)
	for i := range inputs {
		inputs[i] = transformertest.StringInput("in", 0, fmt.Sprintf("key-%d", i%keys), "v")
	}
	for _, f := range fields {
		b.Run(f.name, func(b *testing.B) {
			tr := transformer.New(func(ctx context.Context, rec *transformer.Record, s custState, out *transformer.Emitter[custState]) error {
				if s.Token == nil {
					tok, err := f.codec.Encode("customer-token-" + string(rec.Key))
					if err != nil {
						return err
					}
					s.Token = tok
				} else if v, err := f.codec.Decode(s.Token); err != nil || len(v) == 0 {
					return fmt.Errorf("decode: %w", err)
				}
				s.N++
				out.SetState(s)
				return nil
			})
			d, err := transformertest.New(tr)
			require.NoError(b, err)
			ctx := context.Background()
			_, err = d.Process(ctx, inputs...) // seal every key's field once
			require.NoError(b, err)
			for b.Loop() {
				if _, err := d.Process(ctx, inputs...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*records), "ns/record")
		})
	}
}
