// Package transformertest runs a transformer without Kafka, with the
// semantics of the runtime, so that transforms can be tested as plain unit
// tests. It is for users' tests (and this module's). The batch semantics
// are not re-implemented here: a Driver runs each partition's records
// through the same function a task of the runtime uses (internal/batch).
//
// A Driver takes the place of the runner and its tasks. Each call of
// Process is one batch (one poll): the records are grouped by partition (a
// task each, run concurrently) and within a partition bucketed by state key; the records of
// one bucket run serially in input-topic order, then offset order, each
// seeing the state the previous one left; buckets run concurrently. The
// state lives encoded, exactly as the transformer's codec wrote it, in an
// in-memory store per partition; the changelog writes of a batch are
// deduplicated to the last write per key. Offsets are assigned per topic and
// partition as the records arrive, from 0.
//
//	counter := transformer.New(func(ctx context.Context, rec *transformer.Record, n int, out *transformer.Emitter[int]) error {
//		n++
//		out.SetState(n)
//		out.Send("counts", rec.Key, []byte(strconv.Itoa(n)))
//		return nil
//	})
//	d, err := transformertest.New(counter)
//	require.NoError(t, err)
//	_, err = d.Process(ctx,
//		transformertest.StringInput("words", 0, "fox", "fox"),
//		transformertest.StringInput("words", 0, "fox", "fox"))
//	require.NoError(t, err)
//	n, found, err := transformertest.State[int](d, 0, []byte("fox")) // 2, true, nil
//
// A batch is all or nothing: when a transform returns an error, Process
// returns it (a *transformer.ProcessError naming the record, as the runtime does)
// and the Driver is left exactly as before the call: no output, no state
// change, no offset. In the runtime the error ends Run and the records are
// redelivered after a restart; with a Driver, call Process again to replay.
//
// Outputs carry the timestamp, headers and partition the runtime produces
// them with (Output.Partition): the partition is chosen as the runtime's
// producer chooses it, over the partition count of the output topic given
// by OutputPartitions (default: the count a declared output is created
// with, else 1); a nil key without a partitioner goes to partition 0,
// where the runtime spreads such records. Outputs decodes the outputs of a
// declared output topic (transformer.DeclareOutput) to typed keys and
// values.
//
// Codecs the stage encodes with (state, declared outputs) that implement
// flechtwerk.Lifecycle, such as schema-registry codecs, are opened by the
// first Process and closed by Driver.Close, as Run opens and closes them;
// call Close when the test ends (t.Cleanup). The transformer's own value
// is not opened.
//
// # Stores, timers and TTL
//
// A stage with named stores, timers or a TTL runs with the runtime's
// semantics too (see package transformer): each partition has its stores,
// its timers and its stream time, committed with its batches. The Driver's
// wall clock is the machine's until SetNow or Advance set it; every batch
// reads it once. Tick runs a batch without records in every partition
// with timers (as a task does for wall-clock timers), AdvanceStreamTime
// moves stream time as records of other keys would, then ticks. A Batch
// reports the store writes, the timers that fired (Fired) and the keys
// that expired (Expired); the Driver shows the pending timers of a key
// (Timers), its expiry (Expiry), and every store's contents (RawStore,
// StoreState):
//
//	d.SetNow(t0)
//	_, err = d.Process(ctx, order("o1"))       // sets a wall-clock timer at t0+15m
//	d.Advance(15 * time.Minute)
//	b, err := d.Tick(ctx)                       // the timer fires: b.Fired, b.Outputs
//	pending := d.Timers(0, []byte("o1"))        // none left
//
// One difference from the runtime remains: a failed batch leaves every
// partition unchanged, whereas in the runtime the tasks of one poll commit
// independently, so partitions without an error may have committed before
// Run ended; a replay then reprocesses only what was not committed.
//
// # Concurrency
//
// A Driver is safe for concurrent use; batches run one at a time. As in the
// runtime, the transform runs concurrently across state keys (and
// partitions) within a batch, so run the tests with -race.
package transformertest
