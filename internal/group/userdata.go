package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// The userdata of the protocol's join metadata and sync assignments is
// versioned: an int16 version first, then the fields of that version. A
// later version only appends fields, so a decoder reads the fields it
// knows of any version >= 1 and ignores the rest.
const userDataVersion int16 = 1

// memberData is the userdata of a member's join metadata (v1): the
// changelog offsets of the stores it holds locally.
//
//	version int16 | count int32 | count × (task int32, offset int64)
type memberData struct {
	Offsets map[int32]int64
}

// assignmentData is the userdata of a member's sync assignment (v1): the
// tasks it keeps a standby store of.
//
//	version int16 | count int32 | count × task int32
type assignmentData struct {
	Standbys []int32
}

var errShort = errors.New("userdata too short")

func (d memberData) encode() []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(userDataVersion))
	b = binary.BigEndian.AppendUint32(b, uint32(len(d.Offsets)))
	for _, t := range slices.Sorted(maps.Keys(d.Offsets)) {
		b = binary.BigEndian.AppendUint32(b, uint32(t))
		b = binary.BigEndian.AppendUint64(b, uint64(d.Offsets[t]))
	}
	return b
}

// decodeMemberData decodes a member's userdata. Any problem is an error
// and the member's data counts as unknown (never a panic: the bytes come
// from another process).
func decodeMemberData(b []byte) (memberData, error) {
	r := reader{b: b}
	n, err := r.header()
	if err != nil {
		return memberData{}, err
	}
	if int64(n)*12 > int64(len(r.b)) {
		return memberData{}, fmt.Errorf("userdata: %d offsets announced, %d bytes left: %w", n, len(r.b), errShort)
	}
	d := memberData{Offsets: make(map[int32]int64, n)}
	for range n {
		t, _ := r.int32()
		o, _ := r.int64()
		if t < 0 {
			return memberData{}, fmt.Errorf("userdata: negative task %d", t)
		}
		if _, dup := d.Offsets[t]; dup {
			return memberData{}, fmt.Errorf("userdata: task %d twice", t)
		}
		d.Offsets[t] = o
	}
	return d, nil
}

func (d assignmentData) encode() []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(userDataVersion))
	b = binary.BigEndian.AppendUint32(b, uint32(len(d.Standbys)))
	for _, t := range d.Standbys {
		b = binary.BigEndian.AppendUint32(b, uint32(t))
	}
	return b
}

// decodeAssignmentData decodes the userdata of a sync assignment (from the
// group's leader, another process). Any problem is an error.
func decodeAssignmentData(b []byte) (assignmentData, error) {
	r := reader{b: b}
	n, err := r.header()
	if err != nil {
		return assignmentData{}, err
	}
	if int64(n)*4 > int64(len(r.b)) {
		return assignmentData{}, fmt.Errorf("userdata: %d standbys announced, %d bytes left: %w", n, len(r.b), errShort)
	}
	d := assignmentData{Standbys: make([]int32, 0, n)}
	for range n {
		t, _ := r.int32()
		if t < 0 {
			return assignmentData{}, fmt.Errorf("userdata: negative task %d", t)
		}
		d.Standbys = append(d.Standbys, t)
	}
	slices.Sort(d.Standbys)
	if len(slices.Compact(slices.Clone(d.Standbys))) != len(d.Standbys) {
		return assignmentData{}, errors.New("userdata: a standby task twice")
	}
	return d, nil
}

type reader struct{ b []byte }

// header reads the version and the count of v1.
func (r *reader) header() (int32, error) {
	if len(r.b) < 2 {
		return 0, fmt.Errorf("userdata: no version: %w", errShort)
	}
	v := int16(binary.BigEndian.Uint16(r.b))
	r.b = r.b[2:]
	if v < userDataVersion {
		return 0, fmt.Errorf("userdata: version %d, want >= %d", v, userDataVersion)
	}
	n, err := r.int32()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("userdata: negative count %d", n)
	}
	return n, nil
}

func (r *reader) int32() (int32, error) {
	if len(r.b) < 4 {
		return 0, errShort
	}
	v := int32(binary.BigEndian.Uint32(r.b))
	r.b = r.b[4:]
	return v, nil
}

func (r *reader) int64() (int64, error) {
	if len(r.b) < 8 {
		return 0, errShort
	}
	v := int64(binary.BigEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v, nil
}
