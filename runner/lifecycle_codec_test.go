package runner_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/kafkatest"
	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/transformer"
)

// events is a log shared by a stage and its codecs.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = append(e.log, s)
}

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.log...)
}

// loggedCodec is a bytes codec with a Lifecycle that logs into ev.
type loggedCodec struct {
	name    string
	ev      *events
	openErr error
}

func (c *loggedCodec) Encode(b []byte) ([]byte, error) { return b, nil }
func (c *loggedCodec) Decode(b []byte) ([]byte, error) { return append([]byte(nil), b...), nil }
func (c *loggedCodec) Open(context.Context) error {
	c.ev.add("open " + c.name)
	return c.openErr
}
func (c *loggedCodec) Close(context.Context) error { c.ev.add("close " + c.name); return nil }

// loggedStage is a stateless transformer with a Lifecycle that logs into
// ev and sends every record through out.
type loggedStage struct {
	ev  *events
	out *transformer.OutputTopic[[]byte, []byte]
}

func (s *loggedStage) Open(context.Context) error  { s.ev.add("open stage"); return nil }
func (s *loggedStage) Close(context.Context) error { s.ev.add("close stage"); return nil }
func (s *loggedStage) Transform(_ context.Context, rec *transformer.TypedRecord[[]byte], o *transformer.Outputs) error {
	return s.out.Send(o, rec.Key, rec.Value)
}

// TestLifecycleOfCodecs: the codecs a transformer encodes with (state,
// declared outputs) that implement flechtwerk.Lifecycle are opened after
// the stage's value, before anything is consumed, and closed before it,
// after Run's engine stopped; a codec whose Open fails ends Run with an
// *OpenError naming it, before anything is committed, and what was opened
// is closed again. The input codec only decodes and is never opened.
func TestLifecycleOfCodecs(t *testing.T) {
	for _, fail := range []bool{false, true} {
		name := "graceful"
		if fail {
			name = "codec open fails"
		}
		t.Run(name, func(t *testing.T) {
			c := kafkatest.New(t)
			in, out, app := kafkatest.Name("in"), kafkatest.Name("out"), kafkatest.Name("app")
			c.CreateTopic(t, in, 2)
			produceLife(t, c, in)
			ev := &events{}
			cause := errors.New("schema subject not found")
			input := &loggedCodec{name: "input", ev: ev}
			value := &loggedCodec{name: "value", ev: ev}
			if fail {
				value.openErr = cause
			}
			decl := transformer.DeclareOutput[[]byte, []byte](out, transformer.Bytes(), value, transformer.CreateTopic(2, nil))
			st := transformer.StatelessTypedFrom[[]byte](&loggedStage{ev: ev, out: decl},
				transformer.InputCodec[[]byte](input), transformer.Produces(decl))
			r, err := runner.NewTransformer(st, runner.SeedBrokers(c.Brokers...), runner.ApplicationID(app), runner.InputTopics(in))
			require.NoError(t, err)
			if fail {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				err := r.Run(ctx)
				require.ErrorIs(t, err, flechtwerk.ErrStageOpen)
				require.ErrorIs(t, err, cause)
				var oe *runner.OpenError
				require.ErrorAs(t, err, &oe)
				require.Contains(t, oe.Stage, "loggedCodec")
				require.Equal(t, []string{"open stage", "open value", "close stage"}, ev.get())
				require.Empty(t, c.CommittedOffsets(t, app, in), "nothing committed")
				return
			}
			stop := startRunner(t, r)
			kafkatest.WaitFor(t, 30*time.Second, "every record processed", func() bool {
				com := c.CommittedOffsets(t, app, in)
				return com[0] == 10 && com[1] == 10
			})
			require.NoError(t, stop())
			require.Equal(t, []string{"open stage", "open value", "close value", "close stage"}, ev.get())
		})
	}
}
