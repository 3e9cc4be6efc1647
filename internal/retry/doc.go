// Package retry runs an operation again after errors a caller classifies
// as transient: bounded attempts and total time, exponential backoff with
// jitter (github.com/cenkalti/backoff/v5). The runner uses it for sink
// writes and extractor polls (runner.SinkRetry, runner.PollRetry).
//
// A Policy is immutable once built; Do may be called from many goroutines
// at once.
package retry
