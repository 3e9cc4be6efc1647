package extractor

import (
	"errors"
	"fmt"
)

// ErrPageTimeout means a page stayed open longer than PageTimeout. The page
// was aborted (nothing of it is visible, its cursor did not move) and Run
// ended; the config is polled again from its last committed cursor when the
// extractor runs again.
var ErrPageTimeout = errors.New("extractor: page exceeded PageTimeout")

// PollError is a failed poll: the poll function returned an error or
// panicked (Err is then a *flechtwerk.PanicError with the stack), or its
// page exceeded PageTimeout, or its cursor could not be encoded or decoded
// (or its codec panicked). The open page was aborted: nothing of it is
// visible and the config's cursor did not move, so the next run polls the
// config again from its last committed cursor. Pages the poll committed
// before the error stay committed. It ends Run unless runner.PollRetry
// retries it (from the same cursor) or runner.QuarantineFailingConfigs
// isolates the config.
type PollError struct {
	// Key is the config key.
	Key []byte
	Err error
}

func (e *PollError) Error() string {
	return fmt.Sprintf("extractor: poll of config %q failed; open page aborted, cursor not moved: %v", e.Key, e.Err)
}

func (e *PollError) Unwrap() error { return e.Err }
