// Package transform is the transformer engine: what runs a transformer
// (package transformer) once package runner has checked its options.
//
// Run checks the input topics and the changelog (changelogcheck.go), joins
// the group with the cooperative balancer of internal/group and runs the
// main loop (loop.go): it polls, hands each partition's records to its
// task's worker, and the workers process batches and commit one
// transaction per task per commit interval (task.Task), or the offsets of
// an interval that wrote nothing through the group member (commit.go).
// The group callbacks start, restore and release tasks off the main loop
// (rebalance.go); a task whose transaction fails with a transient error is
// closed dirty and re-initialized in place (recover.go); standby replicas
// follow the changelogs of tasks run elsewhere (standby.go).
//
// The engine reports its progress to its runner through Ops, and the
// runner's queries read the running tasks' stores through Query. Hooks
// holds the knobs of the runner's tests and benchmarks.
//
// Only package runner calls it.
package transform
