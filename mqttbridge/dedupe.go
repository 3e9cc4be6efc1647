package mqttbridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/flechtwerk/flechtwerk/transformer"
)

// SeqHeader is the record header that carries a publisher's sequence number
// (decimal) for Dedupe. A relay sets it from the message (its payload, or
// its topic), together with the record key naming the publisher.
const SeqHeader = "flechtwerk.mqtt.seq"

// Window is the state of Dedupe for one publisher (one record key): the
// sequence numbers forwarded at or above Low, sorted. Every sequence number
// below Low counts as seen.
type Window struct {
	Low  uint64   `json:"low"`
	Seen []uint64 `json:"seen"`
}

// Dedupe returns a transformer that closes the bridge's at-least-once
// window downstream: it forwards each record of its input (the bridge's
// output topic) to out unless a record of the same key (the publisher)
// with the same SeqHeader was forwarded before. Run it with runner.NewTransformer
// over the bridge's output topic; its state and its outputs commit in one
// transaction, so a read_committed reader of out sees every (publisher,
// sequence number) exactly once.
//
// The publisher must number its messages (per key, never reusing a
// number). Numbers may arrive out of order (replicas of a shared
// subscription commit independently) by up to window numbers: the state
// keeps the last window numbers seen per key, and a number below all of
// them counts as a duplicate. A record without a valid SeqHeader is an
// invalid record (transformer.InvalidHeader), handled by the runner's
// InvalidRecords policy (the default ends Run).
func Dedupe(out string, window int) *transformer.Stage[Window] {
	if window <= 0 {
		window = 1 << 14
	}
	return transformer.New(func(_ context.Context, rec *transformer.Record, w Window, e *transformer.Emitter[Window]) error {
		seq, err := seqOf(rec)
		if err != nil {
			return transformer.InvalidHeader(SeqHeader, err)
		}
		i, found := slices.BinarySearch(w.Seen, seq)
		if seq < w.Low || found {
			return nil // a copy of a forwarded message
		}
		w.Seen = slices.Insert(w.Seen, i, seq)
		if len(w.Seen) > window {
			w.Low = w.Seen[0] + 1
			w.Seen = w.Seen[1:]
		}
		e.SendRecord(transformer.Output{Topic: out, Key: rec.Key, Value: rec.Value, Headers: rec.Headers})
		e.SetState(w)
		return nil
	}, transformer.StateCodec(transformer.JSON[Window]()))
}

func seqOf(rec *transformer.Record) (uint64, error) {
	var (
		v     []byte
		found bool
	)
	for _, h := range rec.Headers {
		if h.Key == SeqHeader {
			v, found = h.Value, true
		}
	}
	if !found {
		return 0, errors.New("no sequence number header")
	}
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("sequence number %q: %w", v, err)
	}
	return n, nil
}
