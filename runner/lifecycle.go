package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/stage"
)

// OpenError is the error of the Open method of a stage's
// flechtwerk.Lifecycle (a panic of Open is its Err, a
// *flechtwerk.PanicError). Run ended before it consumed, polled or
// committed anything: no transaction was opened and no offset moved.
// errors.Is(err, flechtwerk.ErrStageOpen) holds.
type OpenError struct {
	// Stage names the stage: the type of the user's value.
	Stage string
	// Err is Open's error.
	Err error
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("runner: %s: opening stage %s: %v", flechtwerk.CodeStageOpen, e.Stage, e.Err)
}

// Unwrap returns Err.
func (e *OpenError) Unwrap() error { return e.Err }

// Is reports whether target is flechtwerk.ErrStageOpen.
func (e *OpenError) Is(target error) bool { return target == flechtwerk.ErrStageOpen }

// lifecycleOf returns the lifecycle of the user's value s was built from,
// nil without one.
func lifecycleOf(s Stage) flechtwerk.Lifecycle {
	l, _ := stage.ImplOf(s).(flechtwerk.Lifecycle)
	return l
}

// openStage opens the stage's lifecycle, if it has one, and returns the
// function Run defers to close it: it joins Close's error into *err.
func (r *Runner) openStage(ctx context.Context) (closeStage func(err *error), err error) {
	l := r.life
	if l == nil {
		return func(*error) {}, nil
	}
	name := fmt.Sprintf("%T", l)
	if err := call(func() error { return l.Open(ctx) }); err != nil {
		return nil, &OpenError{Stage: name, Err: err}
	}
	return func(err *error) {
		if _, abandoned := errors.AsType[*BatchTimeoutError](*err); abandoned {
			return // a transform may still run (see Run)
		}
		if cerr := call(func() error { return l.Close(context.WithoutCancel(ctx)) }); cerr != nil {
			*err = errors.Join(*err, fmt.Errorf("runner: closing stage %s: %w", name, cerr))
		}
	}, nil
}

// call runs fn, recovering a panic into a *flechtwerk.PanicError.
func call(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = flechtwerk.Recovered(v)
		}
	}()
	return fn()
}
