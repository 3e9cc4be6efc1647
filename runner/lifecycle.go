package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/internal/stage"
)

// OpenError is the error of the Open method of a stage's
// flechtwerk.Lifecycle, or of one of its codecs' (a panic of Open is its
// Err, a *flechtwerk.PanicError). Run ended before it consumed, polled or
// committed anything: no transaction was opened and no offset moved.
// errors.Is(err, flechtwerk.ErrStageOpen) holds.
type OpenError struct {
	// Stage names the stage: the type of the user's value (or of the
	// codec whose Open failed).
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

// lifecycles returns what Run opens and closes around the stage: the
// lifecycle of the user's value s was built from, if it has one, then
// those of the codecs the stage encodes with (a transformer's state and
// declared output codecs) that implement flechtwerk.Lifecycle.
func lifecycles(s Stage) []flechtwerk.Lifecycle {
	var ls []flechtwerk.Lifecycle
	if l, ok := stage.ImplOf(s).(flechtwerk.Lifecycle); ok {
		ls = append(ls, l)
	}
	if v, ok := stage.ViewOf(s); ok {
		if o, ok := v.(stage.Outputs); ok {
			for _, c := range o.Codecs() {
				if l, ok := c.(flechtwerk.Lifecycle); ok {
					ls = append(ls, l)
				}
			}
		}
	}
	return ls
}

// openStage opens the lifecycles of the stage (see lifecycles), in order,
// and returns the function Run defers to close them, in reverse order: it
// joins their Close errors into *err. When an Open fails, the ones opened
// before it are closed again.
func (r *Runner) openStage(ctx context.Context) (closeStage func(err *error), err error) {
	var opened []flechtwerk.Lifecycle
	closeAll := func(err *error) {
		for i := len(opened) - 1; i >= 0; i-- {
			l := opened[i]
			if cerr := call(func() error { return l.Close(context.WithoutCancel(ctx)) }); cerr != nil {
				*err = errors.Join(*err, fmt.Errorf("runner: closing stage %T: %w", l, cerr))
			}
		}
	}
	for _, l := range r.life {
		if err := call(func() error { return l.Open(ctx) }); err != nil {
			oerr := error(&OpenError{Stage: fmt.Sprintf("%T", l), Err: err})
			closeAll(&oerr)
			return nil, oerr
		}
		opened = append(opened, l)
	}
	return func(err *error) {
		if _, abandoned := errors.AsType[*BatchTimeoutError](*err); abandoned {
			return // a transform may still run (see Run)
		}
		closeAll(err)
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
