// Package extract is the extractor engine: what runs an extractor (package
// extractor) once package runner has checked its options.
//
// The group over the config topics hands out ownership tokens, one per
// partition number (rebalance.go). Each token fences its transactional ID
// (a revocation waits for a fence in flight), restores the cursor store
// from its changelog partition, waits until the config table has caught
// up with the config topics as they were after the fence, and owns the
// configs whose key hashes to it (token.go). The scheduler starts due
// polls of live, unsuspended configs within the concurrency bound, oldest
// due first, and deletes the cursors of tombstoned configs (schedule.go).
// A poll buffers its records in a page; a page commits its records and its
// cursor in one transaction of the token through package txn (page.go).
//
// Only package runner calls it.
package extract
