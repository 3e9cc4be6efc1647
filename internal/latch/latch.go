// Package latch holds the first fatal error of a Run, for the engines (the
// transformer, sink and extractor engines): group callbacks and pollers set
// it, the main loop reads it.
package latch

import "sync"

// Latch keeps the first error set. The zero value is ready.
type Latch struct {
	mu  sync.Mutex
	err error
}

// Set keeps err unless an error was set before.
func (l *Latch) Set(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

// Err returns the first error set, nil before.
func (l *Latch) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Poke sends on a wake channel of capacity one without blocking: a wake
// already pending is enough.
func Poke(wake chan struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}
