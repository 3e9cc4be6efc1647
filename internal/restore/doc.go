// Package restore reads a changelog partition into a store: Recover for a
// task that fenced the partition's writer (package changelog offers it to
// users), RecoverUnfenced for a reader that did not (a standby), and the
// checkpoint rules both apply (Describe, Trusted).
//
// # Concurrency
//
// The functions are safe for concurrent use on different partitions.
package restore
