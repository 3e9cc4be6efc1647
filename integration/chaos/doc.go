// Package chaos proves exactly-once under SIGKILL, zombies and rebalances.
//
// The tests build two processor programs and run several processes of one
// application against a broker (an embedded kfake cluster on 127.0.0.1, or
// the cluster in KAFKA_BROKERS):
//
//   - ./sequencer, a flechtwerk transformer that counts records per key and
//     emits {"key","n","seq"} (seq: the key's count after the record);
//   - ./naive, a plain consume → produce → commit loop without transactions,
//     which the harness must catch producing duplicates.
//
// While a feeder paces numbered inputs over the run, the harness SIGKILLs
// processes at chosen moments (mid-transaction, right after a commit, at
// random, during startup) and restarts them, stops one gracefully
// (SIGTERM) and restarts it, and SIGSTOPs one past its session timeout,
// waking it after its partitions moved (a zombie; woken either as soon as
// the group dropped it or after the new owners committed). It then reads
// the output with read_committed and checks: every input exactly once,
// each key's seq exactly 1..count in order, state restored from the
// changelog (and by a fresh processor fed one more input per key) equal to
// the counts, committed offsets at the input's end and never moving
// backwards. One summary line reports the run:
//
//	chaos: broker=kafka records=100000 processes=3 kills=7 zombies=1 duplicates=0 gaps=0 seq_exact=true state_exact=true offsets_exact=true stops=1 exits=1 task_restarts=0 rejoins=0 ...
//
// exits counts processes that ended by themselves (a woken zombie exits
// fenced, unless it notices its lost group session first and rejoins; the
// harness restarts such processes like an orchestrator).
// task_restarts and rejoins count, from the processes' logs, the tasks
// re-initialized after a transient broker error and the lost group sessions
// ridden out, both without the process exiting.
//
// Against kfake every fault waits for a stable group first, and the member
// of a process the harness killed is evicted (LeaveGroup by member ID, what
// Apache Kafka's session timeout does): kfake's classic group coordinator
// drops members blocked in JoinGroup or SyncGroup when their session timer
// fires, and one dropped in SyncGroup (waiting for a dead leader) stalls
// later rebalances for their whole timeout, which Apache Kafka does not.
// Against Apache Kafka faults land whenever they fall, rebalances included,
// and dead members time out.
//
// Sizes come from the environment: CHAOS_RECORDS (default 20000),
// CHAOS_KILLS (6), CHAOS_ZOMBIES (1), CHAOS_STOPS (1), CHAOS_PROCESSES (3),
// CHAOS_STANDBY (0; n runs every sequencer with n standby replicas,
// -standby-replicas n, and adds standby=n to the summary),
// CHAOS_PARTITIONS (6), CHAOS_KEYS (60), CHAOS_SESSION_TIMEOUT (3s),
// CHAOS_DURATION (how long the feeder paces the inputs; scaled with the
// faults), CHAOS_TIMEOUT (scaled with the size), CHAOS_SEED,
// CHAOS_PROCESSOR_ARGS (extra processor flags), CHAOS_KEEP=dir (keep the
// processor logs there) and CHAOS_RACE=1 (build the processors with
// -race). For example:
//
//	go test -v ./integration/chaos/
//	KAFKA_BROKERS=127.0.0.1:9092 CHAOS_RECORDS=100000 go test -v -run TestChaosExactlyOnce ./integration/chaos/
//	KAFKA_BROKERS=127.0.0.1:9092 CHAOS_RECORDS=1000000 CHAOS_KILLS=40 CHAOS_ZOMBIES=4 CHAOS_STOPS=4 go test -v -timeout 60m -run TestChaosExactlyOnce ./integration/chaos/
//
// TestChaosPipelineExactlyOnce runs ./pipeline, three transformers in one
// runner.Pipeline (input -> stamp, a count per input key -> a repartition
// topic -> rekey, by a word derived from the input -> a repartition topic
// -> count, per word -> output), in three processes under SIGKILLs (at
// random and during startup), a graceful stop and a zombie. It checks every
// input exactly once at the end, each input key's stamp and each word's
// count exactly 1..count, and every stage's group at its input's end. Its
// sizes are CHAOS_PIPELINE_RECORDS (6000), CHAOS_PIPELINE_KILLS (4),
// CHAOS_PIPELINE_DURATION (15s, 25s on Apache Kafka), CHAOS_PIPELINE_WORDS
// (13) and CHAOS_PIPELINE_ARGS (extra ./pipeline flags, e.g.
// -commit-interval 1s), besides the shared CHAOS_* variables:
//
//	chaos: pipeline broker=kfake stages=3 records=6000 processes=3 kills=4 zombies=1 stops=1 duplicates=0 gaps=0 seq_exact=true offsets_exact=true ...
//
// TestChaosClusterFaults runs the same chaos against the three-broker
// cluster of integration/kafka/cluster.sh (KAFKA_CLUSTER names its
// directory; skipped otherwise) and adds broker faults (SIGKILL and restart
// of the leader of an input, output and changelog partition and of a
// task's transaction coordinator; a broker frozen past its session timeout;
// preferred leader elections while a processor restores) and connection
// faults on a toxiproxy proxy per broker (cuts, resets, stalls, latency).
// Its summary line adds the cluster's counts:
//
//	chaos: broker=kafka records=200000 ... cluster_brokers=3 broker_kills=4 broker_freezes=1 fenced=1 elections=2 conn_cuts=9 conn_resets=8 conn_stalls=8 conn_latency=8 offsets_exact=true ...
//
// Run it with integration/kafka/test-cluster.sh (make test-cluster).
//
// Processor logs (one file per process generation) stay in the test's
// temporary directory; the tails are printed when something fails.
package chaos
