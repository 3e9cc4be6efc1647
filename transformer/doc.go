// Package transformer is the user API for stream transformations: a user
// type implements Transformer (or StatelessTransformer, or a typed form),
// or a function is adapted by Func (StatelessFunc, TypedFunc,
// TypedStatelessFunc), as http.HandlerFunc adapts a function to an
// http.Handler. From (New for a function) builds a *Stage ready to run with
// runner.NewTransformer or to test with transformertest.New. Everything exported here
// is for users; the runtime drives a *Stage through internal/stage (an
// unexported handle the type embeds), so nothing of the engine is part of
// this API.
//
// Transform is called once per input record. It receives the record, its
// own copy of the current state of the record's state key, and an *Emitter
// through which it sends output records and sets or deletes that state.
// The runtime (package runner) commits, for each task and batch, the
// outputs, the last state written per key and the input offsets in one
// Kafka transaction.
//
//	counter := transformer.New(func(ctx context.Context, rec *transformer.Record, count int, out *transformer.Emitter[int]) error {
//		count++
//		out.SetState(count)
//		out.Send("counts", rec.Key, []byte(strconv.Itoa(count)))
//		return nil
//	})
//
// A stage that owns resources is a user type; when it also implements
// flechtwerk.Lifecycle, the runner opens it before the first record and
// closes it after Run's engine stopped:
//
//	type enricher struct{ db *sql.DB }
//
//	func (e *enricher) Open(ctx context.Context) (err error) { e.db, err = sql.Open("pgx", dsn); return err }
//	func (e *enricher) Close(context.Context) error         { return e.db.Close() }
//	func (e *enricher) Transform(ctx context.Context, rec *transformer.Record, _ transformer.None, out *transformer.Emitter[transformer.None]) error {
//		...
//	}
//
//	stage := transformer.From[transformer.None](&enricher{})
//
// State is typed through generics and stored encoded by a Codec (JSON by
// default, raw bytes with Bytes; set another with the StateCodec option). The state key defaults to the record key;
// override it with the StateKey option. Stateless transformers (Stateless)
// never open a store.
//
// # Typed input and invalid records
//
// TypedFrom and StatelessTypedFrom (NewTyped and StatelessTyped for
// functions) build a transformer over decoded input values: the InputCodec
// option is its value Serde (Kafka Streams' Consumed.with), JSON by
// default, and Transform receives a *TypedRecord[V] whose Value is decoded
// and whose Record.Value keeps the raw bytes. The other constructors stay
// untyped: Transform sees raw bytes.
//
//	orders := transformer.StatelessTyped(func(ctx context.Context, rec *transformer.TypedRecord[Order], out *transformer.Outputs) error {
//		if rec.Value.Amount < 0 {
//			return transformer.Invalid(fmt.Errorf("negative amount %d", rec.Value.Amount))
//		}
//		...
//	}, transformer.InputCodec(orderCodec))
//
// A value that does not decode, or a record the transform rejects with
// Invalid, InvalidKey, InvalidHeader or an error wrapping ErrInvalidRecord,
// is an invalid record: an *InvalidRecordError naming its topic,
// partition, offset, the part that failed and the raw bytes. The runner's
// policy (runner.InvalidRecords) decides what becomes of it: crash (the
// default: like any error of a transform), skip, substitute a value, or
// send it to a dead-letter topic in the batch's transaction. Any other
// error of a transform always ends Run.
//
// # Outputs
//
// An Output's zero values mean what Kafka Streams does: a zero Timestamp is
// the input record's, and without ToPartition the record goes where its
// topic's partitioner puts it (Partitioner, PartitionBy; by default
// Murmur2 of the key, as Kafka's default partitioner). The InputHeaders
// option puts the input's headers before each output's own. A partition
// the topic does not have aborts the task's transaction
// (*flechtwerk.OutputError, flechtwerk.ErrOutputPartition).
//
// Typed outputs are declared once with DeclareOutput (topic, key and value
// codecs; CreateTopic, PartitionBy) and listed with the Produces option;
// transforms send typed keys and values through them:
//
//	counts := transformer.DeclareOutput("counts", transformer.String(), transformer.JSON[int]())
//	st := transformer.New(func(ctx context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
//		n++
//		out.SetState(n)
//		return counts.Send(out, string(rec.Key), n)
//	}, transformer.Produces(counts))
//
// Run checks at start that every declared topic exists (or creates it)
// and opens the stage's state and output codecs that implement
// flechtwerk.Lifecycle (not its input codec, which only decodes). An
// encode error fails the call with a *flechtwerk.OutputError
// (flechtwerk.ErrOutputEncode) naming the topic; it is never dropped.
//
// # Stores, timers and TTL
//
// A stage may keep named stores beside its per-key state (NewStore,
// listed with Stores; read and written through the call's out: Get, Put,
// Delete, Range, Prefix), read other keys' state (Emitter.StateOf,
// RangeState), set timers of its state key (Emitter.SetTimer in event
// time, SetWallTimer in wall-clock time, CancelTimer; fired into the
// OnTimer callback: an OnTimer method of the Transformer, or the OnTimer
// option) and expire state (StateTTL with OnExpire, StoreTTL):
//
//	st := transformer.From[Session](sessionizer{},
//		transformer.StateTTL(24*time.Hour, transformer.WallClock))
//
//	func (sessionizer) Transform(ctx context.Context, rec *transformer.Record, s Session, out *transformer.Emitter[Session]) error {
//		s.Clicks++
//		out.SetState(s)
//		out.SetTimer("close", rec.Timestamp.Add(30*time.Minute))
//		return nil
//	}
//
//	func (sessionizer) OnTimer(ctx context.Context, t transformer.Timer, s Session, out *transformer.Emitter[Session]) error {
//		out.DeleteState()
//		out.Send("sessions", t.Key, encode(s))
//		return nil
//	}
//
// Event time is the task's stream time: the largest timestamp of the
// records of its partition so far (committed, so it survives restarts); a
// record's call sees it including its own timestamp. Wall-clock time is
// read once per batch (Outputs.Now).
//
// Reads of any key see the state committed and written by the task's
// open transaction before the batch began, under the writes of the same
// state key's earlier calls and of the call itself. Writes of other state
// keys' calls of the same batch are not visible (they run concurrently):
// reads are deterministic. When calls of several state keys of a batch
// write the same store key, the last in bucket order wins: state keys by
// their first record, then keys with only timers by their earliest due
// timer. A store key's expiry (StoreTTL) is the exception: it loses to
// any other state key's write of that store key in the same batch, so a
// key that keeps being written never expires.
//
// Timers fire per key, in that key's place, as if the task processed
// records one at a time in run order (input topic, then offset):
//
//  1. An event-time timer fires just before the first record of its key
//     whose stream time before it (the largest timestamp of the earlier
//     records) has reached Due; a wall-clock timer due by the batch's time
//     fires before the key's first record.
//  2. After the key's last record, the timers due by the stream time after
//     the batch, or by the batch's time, fire. The task also runs batches
//     without records (ticks) while a timer is due (a wall-clock one by
//     now, an event-time one by its stream time), at most one per 10 ms.
//     A batch fires a bounded number of due timers of keys without
//     records in it (a backlog after downtime spreads over several
//     transactions, the earliest due first); keys with records in the
//     batch fire all theirs.
//  3. Due timers of one key fire in (Due, Name) order, whatever the clock.
//  4. A timer set (or moved) by the key's calls whose time has passed fires
//     at the next of these points, after the call that set it; one
//     cancelled does not fire. A timer fires at most once per batch: set
//     in the past again by its own callback, it fires in the next batch.
//  5. A fired timer is removed unless its callback sets it again.
//
// A timer callback's outputs without a Timestamp carry the timer's Due
// (event time) or the batch's time (wall clock). Its outputs, writes and
// the removal of the timer commit in the task's transaction: a timer
// fires exactly once in effect, across kills, moves and restarts. An
// error of a callback is a *TimerError and fails the batch like a
// transform's.
//
// A timer of a key that has state rides on that state (at most 8 timers
// of a key do; others are set where they are due): its due time is kept
// with the state (in the store and on its changelog record), and the
// timer store holds the timer at or before it. Moving it later, as a
// session timeout set by every record does, so costs nothing beyond the
// state write; when the earlier time comes, the timer moves on to its
// due time instead of firing (about one timer record per timeout for a
// key that keeps moving it). A call that sets or cancels such a timer
// without SetState writes the state as it is (a StateTTL still counts
// from its last SetState); a deleted or expired state leaves its timers
// in the timer store at their due times. None of this changes when a
// timer fires, except after a run of the stage with none of stores,
// timers and TTL, whose writes keep no due times: its keys' timers then
// fire at the earlier times the timer store holds.
//
// # Semantics
//
//   - Records of one state key within a batch run serially, in input-topic
//     order then offset order; each sees the state the previous one left.
//     Records of different keys run concurrently: Transform must be safe
//     for concurrent use across keys.
//   - The state passed in is decoded afresh for every call: mutating it
//     without SetState changes nothing.
//   - An error returned by a transform aborts the task's batch: none of its
//     outputs, state writes or offsets become visible and Run ends with the
//     error, a *ProcessError naming the record (a panic is recovered into
//     one whose Err is a *flechtwerk.PanicError). There is no retry; restart the process to replay from the last
//     committed offset.
//
// # Concurrency
//
// A *Stage is immutable once built and safe for concurrent use. An
// *Emitter belongs to one call and must not be kept after it returns.
// Lifecycle methods are never called concurrently with Transform: Open
// returns before the first call starts, Close starts after the last
// returned.
package transformer
