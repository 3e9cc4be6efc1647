package transformertest_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/transformer"
	"github.com/flechtwerk/flechtwerk/transformertest"
)

// openCodec is an int codec with a flechtwerk.Lifecycle that refuses to
// encode unless open (as a schema-registry codec needs its registry).
type openCodec struct {
	openErr error

	mu            sync.Mutex
	open          bool
	opens, closes int
}

func (c *openCodec) Open(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.openErr != nil {
		return c.openErr
	}
	c.open = true
	c.opens++
	return nil
}

func (c *openCodec) Close(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open = false
	c.closes++
	return nil
}

func (c *openCodec) Encode(v int) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.open {
		return nil, errors.New("codec not open")
	}
	return []byte(strconv.Itoa(v)), nil
}

func (c *openCodec) Decode(b []byte) (int, error) { return strconv.Atoi(string(b)) }

// The Driver opens the stage's state and declared-output codecs before
// the first record and closes them on Close, once each.
func TestDriverOpensAndClosesCodecs(t *testing.T) {
	state, value := &openCodec{}, &openCodec{}
	counts := transformer.DeclareOutput[string, int]("counts", transformer.String(), value)
	st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		n++
		e.SetState(n)
		return counts.Send(e, string(rec.Key), n)
	}, transformer.StateCodec[int](state), transformer.Produces(counts))
	d, err := transformertest.New(st)
	require.NoError(t, err)
	for range 2 {
		_, err = d.Process(context.Background(), transformertest.StringInput("in", 0, "k", "v"))
		require.NoError(t, err)
	}
	outs, err := transformertest.Outputs(d, counts)
	require.NoError(t, err)
	require.Len(t, outs, 2)
	require.Equal(t, 2, outs[1].Value)
	require.Equal(t, 1, state.opens)
	require.Equal(t, 1, value.opens)
	require.Zero(t, state.closes)

	require.NoError(t, d.Close(context.Background()))
	require.NoError(t, d.Close(context.Background()), "a second Close is a no-op")
	require.Equal(t, 1, state.closes)
	require.Equal(t, 1, value.closes)
	_, err = d.Process(context.Background(), transformertest.StringInput("in", 0, "k", "v"))
	require.ErrorContains(t, err, "Process after Close")
}

// A codec whose Open fails fails Process with flechtwerk.ErrStageOpen
// naming it; nothing is processed, and the codecs opened before it are
// closed again.
func TestDriverCodecOpenFails(t *testing.T) {
	state, value := &openCodec{}, &openCodec{openErr: errors.New("registry down")}
	counts := transformer.DeclareOutput[string, int]("counts", transformer.String(), value)
	st := transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		e.SetState(n + 1)
		return counts.Send(e, string(rec.Key), n+1)
	}, transformer.StateCodec[int](state), transformer.Produces(counts))
	d, err := transformertest.New(st)
	require.NoError(t, err)
	_, err = d.Process(context.Background(), transformertest.StringInput("in", 0, "k", "v"))
	require.ErrorIs(t, err, flechtwerk.ErrStageOpen)
	require.ErrorContains(t, err, "registry down")
	require.ErrorContains(t, err, "*transformertest_test.openCodec")
	require.Empty(t, d.Outputs())
	require.Equal(t, 1, state.opens)
	require.Equal(t, 1, state.closes, "closed again")
	require.NoError(t, d.Close(context.Background()))
}

// A Pipeline's Close closes the codecs of every stage's Driver.
func TestPipelineCloseClosesEveryDriver(t *testing.T) {
	codecs := []*openCodec{{}, {}}
	p := transformertest.NewPipeline()
	for i, c := range codecs {
		out := fmt.Sprintf("t%d", i+1)
		decl := transformer.DeclareOutput[string, int](out, transformer.String(), c)
		st := transformer.Stateless(func(_ context.Context, rec *transformer.Record, o *transformer.Outputs) error {
			return decl.Send(o, string(rec.Key), 1)
		}, transformer.Produces(decl))
		d, err := transformertest.New(st)
		require.NoError(t, err)
		require.NoError(t, p.Add(out, d, fmt.Sprintf("t%d", i)))
	}
	require.NoError(t, p.Process(context.Background(), transformertest.StringInput("t0", 0, "k", "v")))
	for _, c := range codecs {
		require.Equal(t, 1, c.opens)
	}
	require.NoError(t, p.Close(context.Background()))
	for _, c := range codecs {
		require.Equal(t, 1, c.closes)
	}
}
