package task

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flechtwerk/flechtwerk/transformer"
)

// rerunStage counts per key. A record "t:D" only moves the key's carried
// timer x to D (a write forced by the timer, no SetState); "st:D" counts
// and sets x to D. With ttl, the state expires after an hour of event
// time and its expiry sends "exp KEY".
func rerunStage(ttl bool) *transformer.Stage[int] {
	opts := []transformer.Opt{transformer.OnTimer(func(context.Context, transformer.Timer, int, *transformer.Emitter[int]) error { return nil })}
	if ttl {
		opts = append(opts, transformer.StateTTL(time.Hour, transformer.EventTime),
			transformer.OnExpire(func(_ context.Context, key []byte, _ int, o *transformer.Outputs) error {
				o.Send("out", key, fmt.Appendf(nil, "exp %s", key))
				return nil
			}))
	}
	return transformer.New(func(_ context.Context, rec *transformer.Record, n int, e *transformer.Emitter[int]) error {
		v := string(rec.Value)
		if ms, ok := strings.CutPrefix(v, "t:"); ok {
			d, _ := strconv.ParseInt(ms, 10, 64)
			e.SetTimer("x", time.UnixMilli(d))
			return nil
		}
		e.SetState(n + 1)
		if ms, ok := strings.CutPrefix(v, "st:"); ok {
			d, _ := strconv.ParseInt(ms, 10, 64)
			e.SetTimer("x", time.UnixMilli(d))
		}
		return nil
	}, opts...)
}

// TestTTLAfterRunWithoutTTL: a key stamped under a StateTTL whose expiry
// timer a run without the TTL fired and dropped still expires once the
// TTL is back, also when the first write of the new run only moves a
// carried timer (forced) and the next one's hint meets that recent
// stamp.
func TestTTLAfterRunWithoutTTL(t *testing.T) {
	for _, forced := range []bool{false, true} {
		t.Run(fmt.Sprintf("forced=%v", forced), func(t *testing.T) {
			dir := t.TempDir()
			open := func(ttl bool) *fuzzHarness {
				h := &fuzzHarness{t: t, dir: dir, stage: rerunStage(ttl)}
				h.open()
				return h
			}
			h := open(true)
			h.run(carriedRec("k", "", 1000))
			h.commitOpen()
			h.run(carriedRec("k", "st:10000000", 1010)) // x carried by the stamp
			h.commitOpen()
			h.close()

			h = open(false)
			h.run(carriedRec("o", "", 3700000)) // k's expiry timer comes due and goes
			h.commitOpen()
			h.close()

			h = open(true)
			defer h.close()
			if forced {
				h.run(carriedRec("k", "t:20000000", 3700010)) // keeps the stamp (event time, 1010)
				h.commitOpen()
			}
			h.run(carriedRec("k", "", 3700020)) // expires at about 7300020
			h.commitOpen()
			out := h.run(carriedRec("o", "", 9000000))
			h.commitOpen()
			require.Contains(t, out, "exp k", "k written at 3700020 with a 1h StateTTL did not expire by 9000000")
		})
	}
}
