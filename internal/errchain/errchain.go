package errchain

import "errors"

// Without returns err's chain without the errors that match target
// (errors.Is): err itself when it does not match; otherwise the causes
// of err (through Unwrap, recursively) that do not match, joined, or nil
// when there are none. The result never matches target.
func Without(err, target error) error {
	if err == nil || !errors.Is(err, target) {
		return err
	}
	var keep []error
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if !errors.Is(e, target) {
			keep = append(keep, e)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	switch len(keep) {
	case 0:
		return nil
	case 1:
		return keep[0]
	}
	return errors.Join(keep...)
}
