// Package sink is the user API for sinks: stages that write records of
// Kafka topics to a system outside Kafka (a database, an HTTP API).
//
// A user type implements Sink, or a function is adapted by WriteFunc, as
// http.HandlerFunc adapts a function to an http.Handler. New builds a
// *Stage ready to run with runner.NewSink; the Delivery option is required.
// A Sink that owns resources (a connection pool, an HTTP client) may also
// implement flechtwerk.Lifecycle: the runner opens it before the first
// record is consumed and closes it after Run's engine stopped.
//
//	type rows struct{ db *sql.DB }
//
//	func (r *rows) Open(ctx context.Context) (err error) { r.db, err = sql.Open("pgx", dsn); return err }
//	func (r *rows) Close(context.Context) error         { return r.db.Close() }
//	func (r *rows) Write(ctx context.Context, batch []sink.Record[Order]) error {
//		... // one database transaction, an upsert per record
//	}
//
//	st := sink.New[Order](&rows{}, sink.Delivery(sink.AtLeastOnce))
//
// Exactly-once covers Kafka to Kafka only: a sink declares AtLeastOnce
// (offsets committed once what they produced is durable; Write must be
// idempotent) or AtMostOnce (offsets committed on a timer; a crash loses
// what was polled and not written). A value that does not decode is an
// invalid record, for the runner's InvalidRecords policy.
//
// # Concurrency
//
// Write is called for different partitions at the same time and never
// twice at once for one partition. Lifecycle methods are never called
// concurrently with Write: Open returns before the first Write starts,
// Close starts after the last returned. A *Stage is immutable once built.
package sink
