package errchain_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/internal/errchain"
)

var target = errors.New("target")

type marked struct{ err error }

func (m *marked) Error() string   { return "marked: " + m.err.Error() }
func (m *marked) Unwrap() error   { return m.err }
func (m *marked) Is(t error) bool { return t == target }

func TestWithout(t *testing.T) {
	other := fmt.Errorf("other: %w", io.EOF)
	tests := []struct {
		name string
		err  error
		keep []error // each must stay in the chain
	}{
		{"nil", nil, nil},
		{"not matching stays whole", other, []error{other, io.EOF}},
		{"the target alone", target, nil},
		{"wrapped target", fmt.Errorf("x: %w", target), nil},
		{"target and another cause", fmt.Errorf("%w: %w", target, io.EOF), []error{io.EOF}},
		{"a type matching by Is keeps its cause", &marked{io.ErrUnexpectedEOF}, []error{io.ErrUnexpectedEOF}},
		{"joined", errors.Join(target, other), []error{other, io.EOF}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := errchain.Without(tc.err, target)
			require.False(t, errors.Is(got, target))
			if tc.keep == nil && tc.err != nil && errors.Is(tc.err, target) {
				require.NoError(t, got)
			}
			for _, k := range tc.keep {
				require.ErrorIs(t, got, k)
			}
		})
	}
}
