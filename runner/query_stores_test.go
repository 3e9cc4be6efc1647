package runner

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/engine/transform"
	"github.com/flechtwerk/flechtwerk/store"
	"github.com/flechtwerk/flechtwerk/task/process"
)

// storesProc is a Stores processor with the given named stores.
type storesProc struct {
	stateful bool
	stores   []string
	timers   bool
}

func (p storesProc) Validate() error                            { return nil }
func (p storesProc) Stateful() bool                             { return p.stateful }
func (p storesProc) Prepare(*kgo.Record) (process.Input, error) { return process.Input{}, nil }
func (p storesProc) Process(context.Context, process.Input, []byte, bool) (process.Result, error) {
	return process.Result{}, nil
}
func (p storesProc) Stores() []process.StoreSpec {
	var out []process.StoreSpec
	for _, n := range p.stores {
		out = append(out, process.StoreSpec{Name: n})
	}
	return out
}
func (p storesProc) Timers() bool { return p.timers }
func (p storesProc) ProcessState(context.Context, process.Input, []byte, bool, process.State) (process.Result, error) {
	return process.Result{}, nil
}
func (p storesProc) Fire(context.Context, process.Timer, []byte, bool, process.State) (process.Result, error) {
	return process.Result{}, nil
}

// plainEngine serves default stores only; namedEngine named ones too.
type plainEngine struct{ stores map[int32]*store.Store }

func (e plainEngine) ReadStore(n int32, fn func(*store.Store) error) (bool, error) {
	st := e.stores[n]
	if st == nil {
		return false, nil
	}
	return true, fn(st)
}

type namedEngine struct {
	plainEngine
	named map[string]map[int32]*store.Store
}

func (e namedEngine) ReadNamedStore(n int32, name string, fn func(*store.Store) error) (bool, error) {
	st := e.named[name][n]
	if st == nil {
		return false, nil
	}
	return true, fn(st)
}

func openWith(t *testing.T, timers bool, ws ...store.Write) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{Timers: timers})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	require.NoError(t, st.Apply(ws))
	return st
}

// TestReadStore: queries reach the store they name, of the partition they
// name; unknown names and stateless defaults are refused; a task that
// does not run here is reported as such (false), and an engine without
// named stores is refused for them.
func TestReadStore(t *testing.T) {
	def := openWith(t, false, store.Write{Key: []byte("k"), Value: []byte("default")})
	counts := openWith(t, false, store.Write{Key: []byte("k"), Value: []byte("counts")},
		store.Write{Key: []byte("l"), Value: []byte("counts-l")}, store.Write{Key: []byte("m"), Value: []byte("counts-m")})
	timers := openWith(t, true, store.Write{Key: store.TimerKey([]byte("k"), "t"), Value: store.TimerValue(1, 5)})
	eng := namedEngine{
		plainEngine: plainEngine{stores: map[int32]*store.Store{3: def}},
		named:       map[string]map[int32]*store.Store{"counts": {3: counts}, "timers": {3: timers}},
	}
	r := &Runner{cfg: config.Options{ApplicationID: "app"}, proc: storesProc{stateful: true, stores: []string{"counts", "dedupe"}, timers: true}}
	require.Equal(t, []string{"counts", "dedupe", "timers"}, r.StoreNames())

	get := func(q storeEngine, name string, p int32, key string) (string, bool, error) {
		var v []byte
		ok, err := r.readStore(q, name, p, func(st *store.Store) error {
			var err error
			v, _, err = st.Get([]byte(key))
			return err
		})
		return string(v), ok, err
	}
	for _, tc := range []struct {
		name, store, key, want string
		partition              int32
		ok                     bool
		err                    error
	}{
		{name: "default", key: "k", partition: 3, ok: true, want: "default"},
		{name: "named", store: "counts", key: "k", partition: 3, ok: true, want: "counts"},
		{name: "timers", store: "timers", key: string(store.TimerKey([]byte("k"), "t")), partition: 3, ok: true, want: string(store.TimerValue(1, 5))},
		{name: "not here", store: "counts", key: "k", partition: 4},
		{name: "declared, not open here", store: "dedupe", key: "k", partition: 3},
		{name: "unknown", store: "nope", key: "k", partition: 3, err: ErrNoSuchStore},
		{name: "uppercase unknown", store: "Counts", key: "k", partition: 3, err: ErrNoSuchStore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, ok, err := get(eng, tc.store, tc.partition, tc.key)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				require.Contains(t, err.Error(), tc.store)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, v)
		})
	}

	// A scan of a named store, bounded.
	var keys []string
	ok, err := r.readStore(eng, "counts", 3, func(st *store.Store) error {
		return st.Scan([]byte("l"), nil, func(k, _ []byte) (bool, error) { keys = append(keys, string(k)); return true, nil })
	})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{"l", "m"}, keys)

	// Not running: reported false, for the caller to say why.
	_, ok, err = get(nil, "counts", 3, "k")
	require.NoError(t, err)
	require.False(t, ok)

	// An engine that does not serve named stores.
	_, _, err = get(eng.plainEngine, "counts", 3, "k")
	require.ErrorIs(t, err, ErrNotQueryable)

	// A store error names the store and partition.
	boom := errors.New("boom")
	_, err = r.readStore(eng, "counts", 3, func(*store.Store) error { return boom })
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, `store "counts" of partition 3`)

	// Without timers there is no "timers" store; a stateless processor
	// has no default one; a plain processor has no named stores.
	r.proc = storesProc{stores: []string{"counts"}}
	_, _, err = get(eng, "timers", 3, "k")
	require.ErrorIs(t, err, ErrNoSuchStore)
	_, _, err = get(eng, "", 3, "k")
	require.ErrorIs(t, err, ErrNotQueryable)
	v, ok, err := get(eng, "counts", 3, "k")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "counts", v)
}

// The engine's query handle reads named stores: without it GetStore and
// ScanStore would refuse every named store with ErrNotQueryable.
var _ namedStores = transform.Query{}
