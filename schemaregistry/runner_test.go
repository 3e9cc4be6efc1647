package schemaregistry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/schemaregistry"
	"github.com/flechtwerk/flechtwerk/transformer"
)

type orderV2 struct {
	ID       string `avro:"id"`
	Amount   int64  `avro:"amount"`
	Currency string `avro:"currency"`
}

type orderText struct {
	ID     string `avro:"id"`
	Amount string `avro:"amount"`
}

// TestRunnerDeclaredOutput runs a transformer on the embedded broker whose
// input and declared output use Avro codecs over the in-process registry.
// (a) Records flow: the output values decode with franz-go's sr.Serde
// under the schema the runner's Open registered on the output subject.
// (c) The input codec is never opened: nothing is registered on the
// input subject, whose only version stays the producer's. (b) An output
// schema incompatible with the subject's registered one ends Run at start
// with SCHEMA_REFUSED naming the subject, before the transform ran and
// before any offset was committed or output written.
func TestRunnerDeclaredOutput(t *testing.T) {
	reg := registries(t)[0]
	c := kafkatest.New(t)
	in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
	c.CreateTopic(t, in, 1)
	inSubject, outSubject := in+"-value", out+"-value"

	var posts atomic.Int32 // registrations and lookups on the input subject
	reg.fake.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/subjects/"+inSubject) {
			posts.Add(1)
		}
		return false
	})
	// The producer's schema is v2 (a field more): an opened input codec
	// of v1 would register a second version on the input subject.
	producer, err := schemaregistry.Avro[orderV2](reg.cl, in, orderAvroV2)
	open(t, producer, err)
	const n = 5
	for i := range n {
		b, err := producer.Encode(orderV2{ID: "o", Amount: int64(i), Currency: "CHF"})
		require.NoError(t, err)
		c.Produce(t, &kgo.Record{Topic: in, Key: []byte("k"), Value: b})
	}
	posts.Store(0)

	input, err := schemaregistry.Avro[order](reg.cl, in, orderAvro)
	require.NoError(t, err)
	output, err := schemaregistry.Avro[order](reg.cl, out, orderAvro)
	require.NoError(t, err)
	decl := transformer.DeclareOutput(out, transformer.String(), transformer.Codec[order](output), transformer.CreateTopic(1, nil))
	var processed atomic.Int32
	st := transformer.StatelessTyped(func(_ context.Context, rec *transformer.TypedRecord[order], o *transformer.Outputs) error {
		processed.Add(1)
		return decl.Send(o, string(rec.Key), order{ID: rec.Value.ID, Amount: 10 * rec.Value.Amount})
	}, transformer.InputCodec[order](input), transformer.Produces(decl))
	r, err := runner.NewTransformer(st, runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(in))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	kafkatest.WaitFor(t, 60*time.Second, "every input committed", func() bool { return c.CommittedOffsets(t, app, in)[0] == n })
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, int32(n), processed.Load())

	// (a) The outputs, read with sr.Serde.
	ss, err := reg.cl.SchemaByVersion(context.Background(), outSubject, -1)
	require.NoError(t, err)
	s := avro.MustParse(orderAvro)
	var serde sr.Serde
	serde.Register(ss.ID, order{}, sr.DecodeFn(func(b []byte, v any) error { return avro.Unmarshal(s, b, v) }))
	recs := c.ReadCommitted(t, out)
	require.Len(t, recs, n)
	for i, rec := range recs {
		var got order
		require.NoError(t, serde.Decode(rec.Value, &got))
		require.Equal(t, order{ID: "o", Amount: 10 * int64(i)}, got)
		require.Equal(t, "k", string(rec.Key))
	}

	// (c) Nothing registered or looked up on the input subject.
	require.Zero(t, posts.Load(), "requests that register or look up on %s", inSubject)
	vs, err := reg.cl.SubjectVersions(context.Background(), inSubject)
	require.NoError(t, err)
	require.Equal(t, []int{1}, vs)

	// (b) An output schema the subject's compatibility refuses (the fake
	// checks none: answer as Confluent's registry does).
	reg.fake.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost || r.URL.Path != "/subjects/"+outSubject+"/versions" {
			return false
		}
		body, err := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var s sr.Schema
		if err != nil || json.Unmarshal(body, &s) != nil || !strings.Contains(s.Schema, `"amount","type":"string"`) {
			return false
		}
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error_code":409,"message":"Schema being registered is incompatible with an earlier schema"}`))
		return true
	})
	app2 := kafkatest.Name("app")
	broken, err := schemaregistry.Avro[orderText](reg.cl, out, orderAvroBroken)
	require.NoError(t, err)
	decl2 := transformer.DeclareOutput(out, transformer.String(), transformer.Codec[orderText](broken))
	processed.Store(0)
	st2 := transformer.StatelessTyped(func(_ context.Context, rec *transformer.TypedRecord[order], o *transformer.Outputs) error {
		processed.Add(1)
		return decl2.Send(o, string(rec.Key), orderText{ID: rec.Value.ID, Amount: "x"})
	}, transformer.InputCodec[order](input), transformer.Produces(decl2))
	r2, err := runner.NewTransformer(st2, runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app2), runner.InputTopics(in))
	require.NoError(t, err)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel2()
	err = r2.Run(ctx2)
	require.ErrorIs(t, err, flechtwerk.ErrSchemaRefused)
	require.ErrorIs(t, err, flechtwerk.ErrStageOpen)
	require.NotErrorIs(t, err, flechtwerk.ErrSchemaRegistryUnavailable)
	require.ErrorContains(t, err, "subject "+outSubject)
	require.Zero(t, processed.Load(), "nothing processed")
	require.Empty(t, c.CommittedOffsets(t, app2, in), "nothing committed")
	require.Len(t, c.ReadCommitted(t, out), n, "no output written")
	vs, err = reg.cl.SubjectVersions(context.Background(), outSubject)
	require.NoError(t, err)
	require.Equal(t, []int{1}, vs)
	vs, err = reg.cl.SubjectVersions(context.Background(), inSubject)
	require.NoError(t, err)
	require.Equal(t, []int{1}, vs)
}
