package schemaregistry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/schemaregistry"
)

// answer returns a registry stub that answers every request with status
// and body, and counts the requests.
func answer(t *testing.T, status int, body string) (*sr.Client, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	cl, err := sr.NewClient(sr.URLs(srv.URL))
	require.NoError(t, err)
	return cl, &n
}

// Only the registry's "schema not found" (error code 40403) proves a
// schema id absent and the record not in the codec's wire format. Any
// other failure to fetch the id (a 404 of a wrong URL path or of a
// subject, an authorization failure, a server error) is not the record's
// fault: it matches flechtwerk.ErrUnavailable, never ErrWireFormat or
// ErrInvalidRecord, so no invalid-record policy can skip the record.
func TestDecodeFetchFailureClassification(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		body       string
		wireFormat bool
	}{
		{"schema not found 40403", http.StatusNotFound, `{"error_code":40403,"message":"Schema not found"}`, true},
		{"404 of a wrong path", http.StatusNotFound, `<html>Not Found</html>`, false},
		{"404 without error code", http.StatusNotFound, `{"message":"HTTP 404 Not Found"}`, false},
		{"subject not found 40401", http.StatusNotFound, `{"error_code":40401,"message":"Subject not found"}`, false},
		{"unauthorized", http.StatusUnauthorized, `{"error_code":401,"message":"Unauthorized"}`, false},
		{"too many requests", http.StatusTooManyRequests, `{"error_code":429,"message":"slow down"}`, false},
		{"server error", http.StatusInternalServerError, `{"error_code":50001,"message":"store error"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, _ := answer(t, tc.status, tc.body)
			c, err := schemaregistry.Avro[order](cl, "orders", orderAvro)
			require.NoError(t, err)
			_, err = c.Decode([]byte{0, 0, 0, 0, 7, 2, 'a', 2})
			require.Error(t, err)
			require.ErrorContains(t, err, "schema id 7")
			if tc.wireFormat {
				require.ErrorIs(t, err, schemaregistry.ErrWireFormat)
				require.ErrorIs(t, err, flechtwerk.ErrInvalidRecord)
				require.NotErrorIs(t, err, flechtwerk.ErrUnavailable)
				return
			}
			require.ErrorIs(t, err, flechtwerk.ErrUnavailable)
			require.NotErrorIs(t, err, schemaregistry.ErrWireFormat)
			require.NotErrorIs(t, err, flechtwerk.ErrInvalidRecord)
		})
	}
}

// Concurrent first decodes of one schema id make one registry request;
// an id the registry answered 40403 for is not asked for again while it
// is cached as absent, and is asked for again after; a schema of another
// type is asked for once; a failed fetch is asked for again.
func TestDecodeSingleFlightAndNegativeCache(t *testing.T) {
	reg := registries(t)[0]
	var fetches atomic.Int32
	release := make(chan struct{})
	reg.fake.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodGet && schemaByID.MatchString(r.URL.Path) {
			fetches.Add(1)
			<-release
		}
		return false
	})
	tp := topic(t)
	w, err := schemaregistry.Avro[order](reg.cl, tp, orderAvro)
	open(t, w, err)
	rd, err := schemaregistry.Avro[order](reg.cl, tp, orderAvro)
	require.NoError(t, err)
	b, err := w.Encode(order{ID: "a", Amount: 1})
	require.NoError(t, err)

	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := rd.Decode(b)
			errs <- err
		})
	}
	// All n decodes wait on the first fetch, which waits on release.
	require.Eventually(t, func() bool { return fetches.Load() >= 1 }, 10*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond) // a second fetch, if any, starts meanwhile
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int32(1), fetches.Load(), "one fetch for %d concurrent first decodes", n)

	// An absent id: one fetch, then the cached answer.
	now := time.Now()
	schemaregistry.SetClock(rd, func() time.Time { return now })
	fetches.Store(0)
	bogus := []byte{0, 0, 0, 0x7f, 0x7f, 2, 'a', 2}
	for range 10 {
		_, err := rd.Decode(bogus)
		require.ErrorIs(t, err, schemaregistry.ErrWireFormat)
		require.ErrorContains(t, err, fmt.Sprintf("schema id %d is not in the registry", 0x7f7f))
	}
	require.Equal(t, int32(1), fetches.Load(), "an absent id is fetched once while cached")
	now = now.Add(schemaregistry.AbsentFor + time.Millisecond)
	_, err = rd.Decode(bogus)
	require.ErrorIs(t, err, schemaregistry.ErrWireFormat)
	require.Equal(t, int32(2), fetches.Load(), "asked again once the absence expired")

	// A schema of another type: fetched once, its error kept.
	j, err := schemaregistry.JSONSchema[order](reg.cl, tp+"-json", orderJSON)
	open(t, j, err)
	jb, err := j.Encode(order{ID: "j", Amount: 1})
	require.NoError(t, err)
	fetches.Store(0)
	for range 3 {
		_, err := rd.Decode(jb)
		require.ErrorIs(t, err, schemaregistry.ErrWireFormat)
		require.ErrorContains(t, err, "is a JSON schema, not AVRO")
	}
	require.Equal(t, int32(1), fetches.Load(), "a schema of another type is fetched once")

	// A failed fetch (not 40403) is not cached: the next decode asks again.
	var down atomic.Bool
	down.Store(true)
	reg.fake.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if down.Load() && r.Method == http.MethodGet && schemaByID.MatchString(r.URL.Path) {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	fresh, err := schemaregistry.Avro[order](reg.cl, tp, orderAvro)
	require.NoError(t, err)
	_, err = fresh.Decode(b)
	require.ErrorIs(t, err, flechtwerk.ErrUnavailable)
	down.Store(false)
	got, err := fresh.Decode(b)
	require.NoError(t, err)
	require.Equal(t, order{ID: "a", Amount: 1}, got)
}

// Open's classification of registry answers: 401 and 403 (and every other
// 4xx) are SCHEMA_REFUSED, not to be retried; 408, 429 and 5xx are
// SCHEMA_REGISTRY_UNAVAILABLE, safe to retry.
func TestOpenClassification(t *testing.T) {
	for _, tc := range []struct {
		status  int
		refused bool
	}{
		{http.StatusUnauthorized, true},
		{http.StatusForbidden, true},
		{http.StatusConflict, true},
		{http.StatusUnprocessableEntity, true},
		{http.StatusRequestTimeout, false},
		{http.StatusTooManyRequests, false},
		{http.StatusInternalServerError, false},
		{http.StatusServiceUnavailable, false},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			cl, _ := answer(t, tc.status, fmt.Sprintf(`{"error_code":%d,"message":"no"}`, tc.status))
			c, err := schemaregistry.Avro[order](cl, "orders", orderAvro)
			require.NoError(t, err)
			err = c.Open(context.Background())
			require.ErrorContains(t, err, "subject orders-value")
			if tc.refused {
				require.ErrorIs(t, err, flechtwerk.ErrSchemaRefused)
				require.NotErrorIs(t, err, flechtwerk.ErrSchemaRegistryUnavailable)
			} else {
				require.ErrorIs(t, err, flechtwerk.ErrSchemaRegistryUnavailable)
				require.NotErrorIs(t, err, flechtwerk.ErrSchemaRefused)
			}
		})
	}
}

// For the codec's own schema the Protobuf message index must be T's,
// whether or not the decoding codec was opened (an input codec is not).
func TestProtobufIndexCheckedWithoutOpen(t *testing.T) {
	reg := registries(t)[0]
	tp := topic(t)
	w, err := schemaregistry.Protobuf[*wrapperspb.StringValue](reg.cl, tp, wrappersProto(t))
	open(t, w, err)
	good, err := w.Encode(wrapperspb.String("x"))
	require.NoError(t, err)
	// Index [3] (Int32Value) instead of [7] (StringValue), same payload.
	payload := header(t, good, w.ID(), []int{7})
	other, _ := new(sr.ConfluentHeader).AppendEncode(nil, w.ID(), []int{3})
	other = append(other, payload...)

	for _, opened := range []bool{false, true} {
		t.Run(fmt.Sprintf("opened=%v", opened), func(t *testing.T) {
			rd, err := schemaregistry.Protobuf[*wrapperspb.StringValue](reg.cl, tp, wrappersProto(t))
			if opened {
				open(t, rd, err)
			} else {
				require.NoError(t, err)
			}
			_, err = rd.Decode(other)
			require.ErrorIs(t, err, schemaregistry.ErrWireFormat)
			require.ErrorContains(t, err, "message index [3] is not the codec's message [7]")
			got, err := rd.Decode(good)
			require.NoError(t, err)
			require.Equal(t, "x", got.GetValue())
		})
	}
}

// A JSON Schema's external $ref is never loaded (the compiler's default
// loader reads local files): the constructor fails with a coded error.
func TestJSONSchemaExternalRefNotLoaded(t *testing.T) {
	reg := registries(t)[0]
	file := filepath.Join(t.TempDir(), "address.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"type":"string"}`), 0o600))
	for _, ref := range []string{"file://" + file, file, "http://127.0.0.1:1/address.json"} {
		_, err := schemaregistry.JSONSchema[map[string]any](reg.cl, "orders",
			`{"type":"object","properties":{"a":{"$ref":"`+ref+`"}}}`)
		require.ErrorIs(t, err, flechtwerk.ErrInvalidOption, ref)
		require.ErrorContains(t, err, "not resolved", ref)
	}
	_, err := schemaregistry.JSONSchema[map[string]any](reg.cl, "orders",
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","$defs":{"a":{"type":"string"}},
 "properties":{"a":{"$ref":"#/$defs/a"}}}`)
	require.NoError(t, err, "a local $ref and a known $schema compile")
}
