// Package extractor is the user API for extractors: pollers that read an
// external source (an HTTP API, a database, files) into Kafka with
// exactly-once delivery, resuming from a cursor.
//
// A user type implements Poller, or a poll function is adapted by Func, as
// http.HandlerFunc adapts a function to an http.Handler. From (New for a
// function) builds a *Stage ready to run with runner.NewExtractor. A Poller that
// owns resources (an HTTP client, a connection pool) may also implement
// flechtwerk.Lifecycle: the runner opens it before the first poll and
// closes it after the last.
//
// Each live record of the config topics is one poll target (a tenant, an
// account, a feed). A poll function is called once per config per
// PollInterval with the config and that config's cursor. It sends records
// and closes pages with Commit: the records of a page and the new cursor
// become visible in one Kafka transaction, so after any crash the next poll
// starts exactly where the last visible page ended.
//
//	type Cursor struct{ After string } // the last item id made visible
//
//	ex := extractor.New(func(ctx context.Context, cfg extractor.Config[Tenant], cur Cursor, out *extractor.Emitter[Cursor]) error {
//		for {
//			page, err := api.ListAfter(ctx, cfg.Config.URL, cur.After)
//			if err != nil {
//				return err // the open page is aborted; Run ends
//			}
//			for _, it := range page.Items {
//				out.Send("items", []byte(it.ID), it.JSON)
//				cur.After = it.ID
//			}
//			// The page's records and the cursor past them, atomically.
//			if err := out.Commit(ctx, cur); err != nil {
//				return err
//			}
//			if !page.More {
//				return nil // the next poll asks for items after cur.After
//			}
//		}
//	})
//	r, err := runner.NewExtractor(ex,
//		runner.SeedBrokers("localhost:9092"),
//		runner.ApplicationID("tenant-items"),
//		runner.ConfigTopics("tenants"),
//		runner.PollInterval(time.Minute),
//	)
//	if err != nil { ... }   // every configuration problem, coded
//	err = r.Run(ctx)         // until ctx is canceled or an error
//
// Config values are decoded once per record (JSON by default, see
// ConfigCodec) and may be enriched once per record (Enrich); cursors are
// typed through generics and stored with a codec (JSON by default, see
// CursorCodec).
//
// # Pages
//
// A page is what a poll sent between two Commits (or between the start of
// the poll and its first Commit). Its records are buffered in memory and
// produced when the page closes, in a transaction that also writes the
// cursor to the changelog; the transaction is open only while the page
// commits. Records sent after the last Commit form a trailing page,
// committed when the poll function returns nil; it leaves the cursor as it
// was, so the next poll reads those records again from the old cursor and
// sends them a second time unless the source no longer returns them. Close
// every page with a Commit of a cursor past its records; keep trailing pages
// for sources that are consumed by reading (a queue drained on read). Keep
// pages small enough to fit in memory.
//
// A page must close within PageTimeout (default 30s), which must be below
// TransactionTimeout (default 60s; runner.NewExtractor rejects anything else with
// flechtwerk.ErrTransactionTimeout). A page that takes longer is aborted:
// its poll's context is canceled and Run ends with a *PollError naming the
// config key (errors.Is ErrPageTimeout).
//
// What cannot be made atomic is the read of the source itself: a page that
// was aborted (a crash, a handover, an error) is read again from the last
// committed cursor, but its first attempt never became visible, so a
// read_committed reader sees every page exactly once.
//
// # Ownership
//
// Instances of one application id join a consumer group (the application
// id) on the config topics, with range assignment. Each partition number N
// an instance holds (of every config topic) is an ownership token with its
// own transactional producer, static transactional ID {application id}-{N}.
// A config belongs to the token its key hashes to (Token: Kafka's murmur2
// hash modulo the partition count), whatever partition the config record
// sits on. Instances beyond the token count hold nothing and stand by.
//
// Cursors live in the compacted changelog topic {application id}-changelog,
// created with as many partitions as the config topics; token N writes its
// cursors to partition N explicitly. When a token is assigned the instance
// fences the token's transactional ID (aborting whatever a previous owner
// left open), restores the token's cursors from its changelog partition,
// read_committed up to the last stable offset, waits until its config
// table has read the config topics up to the last stable offsets listed
// after the fence (configtopic.Table.Sync: it then holds every config and
// tombstone a previous owner saw, so a config its table had not read yet
// is never taken for a deleted one), and only then polls. When a token is
// revoked its polls are canceled, their open pages aborted (a page that is
// committing finishes first), a fence in flight completes, and the token
// is closed. A zombie —
// an instance whose token was taken over — cannot make a page visible: its
// transaction is fenced, and Run ends with fencing.ErrFenced.
//
// The config topics are read in full by every instance (package
// configtopic), read_committed, and kept current while running: a new config
// is polled as soon as it is read, a tombstone stops polls of its key and,
// by default, deletes its cursor with a changelog tombstone in a
// transaction of its token (runner.TombstonedCursors: runner.DeleteCursors or
// runner.KeepCursors). Config topics of one
// extractor must exist (flechtwerk.ErrMissingTopic) and have equal
// partition counts (flechtwerk.ErrPartitionMismatch).
//
// # Scheduling, suspend and wake
//
// Due polls are started oldest due first: a config's next poll falls due
// an interval after its previous poll started, and when polls are due
// faster than Concurrency slots serve them, every config still takes its
// turn. A config whose record has the header flechtwerk.suspended: true
// (SuspendedHeader; works with any config codec) is suspended: it stays
// live and keeps its cursor, but is not polled; a new record of the key
// without the header resumes it from its cursor. runner.Runner.Wake polls a
// config at once, ahead of its interval, for sources that push a notice
// of new data.
//
// A cursor commit that changes nothing — the committed cursor again with
// no records, or the delete of a cursor that does not exist — writes
// nothing and opens no transaction.
//
// # Errors
//
// Run ends at the first error: a poll function's error or panic, a cursor
// codec's panic, or an exceeded PageTimeout (*PollError, naming the config
// key; a panic is a *flechtwerk.PanicError with the stack inside it), an undecodable
// config record or a panicking config decoder or enrich hook
// (*configtopic.RecordError, naming topic, partition and offset), a
// fence (fencing.ErrFenced), or a broker error. The failed poll's open page
// is aborted and nothing of it is visible; pages committed before stay
// committed. The open pages of every other poll are aborted too (a page
// that is committing finishes first), so no transaction is left for the
// transaction timeout to end. There is no retry inside Run: let it crash, and let the
// orchestrator restart it.
//
// # Stopping
//
// Canceling Run's context stops it: running polls are canceled and their
// open pages aborted (a page that is committing finishes), the tokens are
// closed, the instance leaves the group, and Run returns nil. Everything Run
// starts has exited when it returns — so poll functions must return once
// their context is done.
//
// # Concurrency
//
// Polls of different configs run concurrently, at most Concurrency at a
// time; polls of one config never overlap. Poll must be safe for
// concurrent use across configs. An *Emitter belongs to one poll call.
// Lifecycle methods are never called concurrently with Poll: Open returns
// before the first poll starts, Close starts after the last returned.
package extractor
