package process

import (
	"context"
	"time"
)

// TimeKind says which clock a timer or a state TTL follows.
type TimeKind uint8

const (
	// EventTime is the task's stream time: the largest timestamp of the
	// input records the task has processed (control records excluded),
	// as Kafka Streams defines it. It never goes back.
	EventTime TimeKind = 1
	// WallClock is the time of the machine that runs the task.
	WallClock TimeKind = 2
)

// Timer is a timer of a state key: it is due when its clock (Kind)
// reaches Due. A key has at most one timer per Name; setting it again
// replaces it.
type Timer struct {
	// Key is the state key the timer belongs to; its callback runs in
	// that key's bucket, with that key's state.
	Key  []byte
	Name string
	Kind TimeKind
	// Due is a Unix time in milliseconds, as Kafka record timestamps.
	Due int64
}

// TimerOp sets (or replaces) a timer, or cancels it when Cancel is set
// (then only Key and Name count).
type TimerOp struct {
	Timer
	Cancel bool
	// Hint sets the timer only when it has no earlier due time: a timer
	// of the same Key, Name and Kind due at or before Due stays as it is.
	// A hint is a time at or before which the timer may fire early (a
	// state TTL's expiry, which its callback checks against the key's
	// Stamp). After a set or hint of the same timer and Kind in the same
	// transaction it keeps the earlier of the two due times; after a
	// cancel, or a set of the other Kind, it is a set.
	Hint bool
}

// Stamp is what is kept with a write of a key's state: the time of the
// write by a clock (the stream time or the wall-clock time of the call
// that wrote it; Kind 0: none), and the due times of the key's timers
// that are carried with its state. A stamp with neither is no stamp.
type Stamp struct {
	Kind TimeKind
	// At is a Unix time in milliseconds.
	At int64
	// Timers are carried timers of the key (Key nil), at most one per
	// Name: the timer store holds each at or before its Due here (a
	// hint), and a Fire that finds the stamp's Due later moves it there
	// (Result.Moved). A timer set again later so costs a state write,
	// which the call makes anyway, and no timer record.
	Timers []Timer
}

// Timer returns the carried timer name of s.
func (s Stamp) Timer(name string) (Timer, bool) {
	for _, t := range s.Timers {
		if t.Name == name {
			return t, true
		}
	}
	return Timer{}, false
}

// IsZero reports whether s is no stamp: no clock and no carried timer.
func (s Stamp) IsZero() bool { return s.Kind == 0 && len(s.Timers) == 0 }

// StoreSpec is a named store of a Processor (see Stores). Its changelog
// is the topic changelog.StoreTopic(application id, Name); its local
// state is a store of its own beside the task's default one.
type StoreSpec struct {
	Name string
}

// StoreWrite is a write to a key of a named store (Store indexes
// Stores.Stores()), a put of Value or a delete when Delete is set.
type StoreWrite struct {
	Store  int
	Key    []byte
	Value  []byte
	Delete bool
}

// DefaultStore is the store index State uses for the processor's default
// state (the per-key state of Process); named stores are 1 + their index
// in Stores.Stores().
const DefaultStore = 0

// State is the state a call of a Stores processor reads, for any key of
// the task's partition: the state committed and written by the open
// transaction before the batch began, under the writes of the calls of
// the same bucket before this one. Other buckets' writes of the same
// batch are not visible: reads are deterministic however the buckets of
// a batch are scheduled. A State is valid during its call only: the
// bucket's next call may reuse it.
type State interface {
	// Get returns the encoded value of key in store (DefaultStore or a
	// named store's index + 1).
	Get(store int, key []byte) (value []byte, found bool, err error)
	// Scan calls fn for the keys k of store with lo <= k < hi, in
	// ascending byte order (hi nil: no upper bound), until fn returns
	// false or an error. The slices are valid only during the call.
	Scan(store int, lo, hi []byte, fn func(key, value []byte) (bool, error)) error
	// StreamTime is the task's stream time when the call began (Unix
	// milliseconds; 0 before any record): in a record's call, the
	// largest timestamp of the records up to and including that record;
	// in a timer's call, the stream time at which it fired.
	StreamTime() int64
	// Now is the wall-clock time the batch uses for wall-clock timers and
	// TTLs (one value per batch, so a batch is reproducible).
	Now() time.Time
	// Stamp returns the Stamp of the last write of key's default state
	// (Result.Stamp): committed, or written by the open transaction
	// before this call. ok is false when that write had none, or the key
	// has no state. The call may change the Timers of its own key's stamp
	// in place for its Result: nothing reads them after the call.
	Stamp(key []byte) (s Stamp, ok bool, err error)
}

// Stores is implemented by a Processor that keeps named stores, sets
// timers or expires its state. The task then calls ProcessState instead
// of Process, and Fire for every due timer; Result.Writes and
// Result.Timers of both are written in the task's transaction with the
// outputs and the state.
type Stores interface {
	Processor
	// Stores returns the processor's named stores, in a fixed order.
	Stores() []StoreSpec
	// Timers reports whether the processor sets timers (its own or a
	// TTL's): the task then keeps a timer store, whose changelog is
	// changelog.TimersTopic(application id).
	Timers() bool
	// ProcessState is Process with st, the view of every store.
	ProcessState(ctx context.Context, in Input, state []byte, found bool, st State) (Result, error)
	// Fire runs the callback of a due timer t of state key t.Key, whose
	// state is state (found: there is one). The task removes the timer
	// unless the result sets it again (a TimerOp of the same Key and
	// Name). Result.Op applies to t.Key's state as a record's would; the
	// task stamps outputs without a Timestamp with t.Due (EventTime) or
	// State.Now (WallClock). When timers fire relative to records is
	// documented in package transformer ("Stores, timers and TTL").
	Fire(ctx context.Context, t Timer, state []byte, found bool, st State) (Result, error)
}
