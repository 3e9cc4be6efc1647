// Package stamp encodes the stamp kept with a state write
// (process.Stamp): in the store, ahead of the value, and on the
// changelog record (changelog.StampHeader).
package stamp

import (
	"encoding/binary"

	"github.com/flechtwerk/flechtwerk/task/process"
)

// Len is the length of s encoded (Append).
func Len(s process.Stamp) int {
	n := 9
	for _, t := range s.Timers {
		n += 9 + uvarintLen(uint64(len(t.Name))) + len(t.Name)
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// Append appends to b the bytes of s, kept with a state
// (store.Write.Stamp): its kind (0: none) and its time as an int64 big
// endian, then per carried timer its kind, its due time as an int64 big
// endian, the length of its name (uvarint) and its name.
func Append(b []byte, s process.Stamp) []byte {
	b = binary.BigEndian.AppendUint64(append(b, byte(s.Kind)), uint64(s.At))
	for _, t := range s.Timers {
		b = binary.BigEndian.AppendUint64(append(b, byte(t.Kind)), uint64(t.Due))
		b = binary.AppendUvarint(b, uint64(len(t.Name)))
		b = append(b, t.Name...)
	}
	return b
}

// Decode decodes the bytes of a stamp (Append); ok is false unless they
// decode, with known clocks, to a stamp that is not zero.
func Decode(b []byte) (s process.Stamp, ok bool) { return DecodeInto(b, nil) }

// DecodeInto is Decode that appends the stamp's timers to buf[:0], so
// that a caller with room for them allocates no slice.
func DecodeInto(b []byte, buf []process.Timer) (s process.Stamp, ok bool) {
	if !valid(b) {
		return process.Stamp{}, false
	}
	s = process.Stamp{Kind: process.TimeKind(b[0]), At: int64(binary.BigEndian.Uint64(b[1:9]))}
	for b = b[9:]; len(b) > 0; {
		t, name, rest := next(b)
		t.Name = string(name)
		if s.Timers == nil {
			s.Timers = buf[:0]
		}
		s.Timers = append(s.Timers, t)
		b = rest
	}
	return s, true
}

// KindOf returns the clock of the stamp b encodes (Append), 0 when it
// has none or b does not decode. It allocates nothing.
func KindOf(b []byte) process.TimeKind {
	if !valid(b) {
		return 0
	}
	return process.TimeKind(b[0])
}

// TimerOf returns the timer name that the stamp b encodes carries, false
// when it carries none or b does not decode. It allocates nothing.
func TimerOf(b []byte, name string) (process.Timer, bool) {
	if !valid(b) {
		return process.Timer{}, false
	}
	for b = b[9:]; len(b) > 0; {
		t, n, rest := next(b)
		if string(n) == name {
			t.Name = name
			return t, true
		}
		b = rest
	}
	return process.Timer{}, false
}

// valid reports whether b is an encoded stamp (Append) that is not zero.
func valid(b []byte) bool {
	if len(b) < 9 || b[0] != 0 && !knownClock(process.TimeKind(b[0])) {
		return false
	}
	zero := b[0] == 0
	for b = b[9:]; len(b) > 0; zero = false {
		if len(b) < 10 || !knownClock(process.TimeKind(b[0])) {
			return false
		}
		n, w := binary.Uvarint(b[9:])
		if w <= 0 || n == 0 || n > uint64(len(b)-9-w) {
			return false
		}
		b = b[9+w+int(n):]
	}
	return !zero
}

// next splits the first timer off b, a valid timers section: the timer
// (its name apart), its name's bytes and the rest of b.
func next(b []byte) (t process.Timer, name, rest []byte) {
	t = process.Timer{Kind: process.TimeKind(b[0]), Due: int64(binary.BigEndian.Uint64(b[1:9]))}
	n, w := binary.Uvarint(b[9:])
	end := 9 + w + int(n)
	return t, b[9+w : end], b[end:]
}

func knownClock(k process.TimeKind) bool { return k == process.EventTime || k == process.WallClock }

// Due returns timer name of a key as it is due, given the timer store's
// record of it (kind, due) and s, the stamp of the key's state: as s
// carries it when that is later or of another clock (the record is then
// a hint, or of the clock the timer had before its last set), else as
// the record has it.
func Due(s process.Stamp, name string, kind process.TimeKind, due int64) (process.TimeKind, int64) {
	if t, ok := s.Timer(name); ok && (t.Kind != kind || t.Due > due) {
		return t.Kind, t.Due
	}
	return kind, due
}
