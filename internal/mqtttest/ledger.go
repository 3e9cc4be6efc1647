package mqtttest

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// ledger fails the test when the embedded broker itself loses a QoS>0
// message that it accepted from a publisher: a message a matching
// subscription (one member per share group) did not get into its session,
// a message dropped from a persistent session (queue full, packet ids or
// quota exhausted, expiry, a takeover that did not carry it over), or a
// message that ends in no live session and was never acknowledged. It
// tells a broker loss from a loss of the client under test.
type ledger struct {
	mochi.HookBase
	s *mochi.Server

	mu      sync.Mutex
	msgs    map[string]*msgTrail          // by key
	byID    map[holder]string             // session and packet id → key
	pids    map[pidOf][]string            // client id and packet id → what happened, in order
	pending map[string]*mochi.Subscribers // key → subscribers at OnPublish
	takers  map[string]*mochi.Client      // client id → the client taking its session over
	conns   map[*mochi.Client]int         // connection numbers, for the trails
	losses  []string
	nconn   atomic.Int64
}

type holder struct {
	cl *mochi.Client
	id uint16
}

type pidOf struct {
	client string
	id     uint16
}

// msgTrail is what became of one message.
type msgTrail struct {
	events    []string
	completed bool
	holders   map[*mochi.Client]uint16 // sessions it was put into
}

func newLedger(s *mochi.Server) *ledger {
	return &ledger{s: s, msgs: map[string]*msgTrail{}, byID: map[holder]string{}, pids: map[pidOf][]string{},
		pending: map[string]*mochi.Subscribers{}, takers: map[string]*mochi.Client{}, conns: map[*mochi.Client]int{}}
}

func (*ledger) ID() string { return "ledger" }

func (*ledger) Provides(b byte) bool {
	switch b {
	case mochi.OnPublish, mochi.OnPublished, mochi.OnQosPublish, mochi.OnQosComplete, mochi.OnQosDropped,
		mochi.OnPublishDropped, mochi.OnPacketIDExhausted, mochi.OnSessionEstablish, mochi.OnSessionEstablished,
		mochi.OnDisconnect, mochi.OnClientExpired:
		return true
	}
	return false
}

func msgKey(pk packets.Packet) string {
	return pk.Origin + "|" + pk.TopicName + "|" + string(pk.Payload)
}

// name is "client-id#connection" (lock held).
func (l *ledger) name(cl *mochi.Client) string {
	n, ok := l.conns[cl]
	if !ok {
		n = int(l.nconn.Add(1))
		l.conns[cl] = n
	}
	return fmt.Sprintf("%s#%d", cl.ID, n)
}

func (l *ledger) trail(key string) *msgTrail {
	m := l.msgs[key]
	if m == nil {
		m = &msgTrail{holders: map[*mochi.Client]uint16{}}
		l.msgs[key] = m
	}
	return m
}

// logPid records what happened to packet id of the session of cl.
func (l *ledger) logPid(cl *mochi.Client, id uint16, ev string) {
	k := pidOf{cl.ID, id}
	l.pids[k] = append(l.pids[k], ev)
}

func (l *ledger) lose(key, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if key != "" {
		msg = fmt.Sprintf("message %q: %s", key, msg)
	}
	l.losses = append(l.losses, msg)
}

func (l *ledger) OnPublish(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Qos == 0 || cl.Net.Inline {
		return pk, nil
	}
	key := msgKey(pk)
	subs := l.s.Topics.Subscribers(pk.TopicName)
	l.mu.Lock()
	l.pending[key] = subs
	l.trail(key).events = append(l.trail(key).events, "published by "+l.name(cl))
	l.mu.Unlock()
	return pk, nil
}

// OnPublished checks that every plain subscriber and one member of every
// share group (of those subscribed both before and after the publish)
// got the message into its session.
func (l *ledger) OnPublished(cl *mochi.Client, pk packets.Packet) {
	if pk.FixedHeader.Qos == 0 || cl.Net.Inline {
		return
	}
	key := msgKey(pk)
	after := l.s.Topics.Subscribers(pk.TopicName)
	l.mu.Lock()
	defer l.mu.Unlock()
	before := l.pending[key]
	delete(l.pending, key)
	if before == nil {
		return
	}
	m := l.trail(key)
	got := map[string]bool{}
	for h := range m.holders {
		got[h.ID] = true
	}
	for id, sub := range before.Subscriptions {
		if _, ok := after.Subscriptions[id]; ok && sub.Qos > 0 && !got[id] {
			l.lose(key, "the subscriber %s did not get it into its session (%s)", id, strings.Join(m.events, "; "))
		}
	}
	for group, members := range before.Shared {
		still := after.Shared[group]
		if len(still) == 0 {
			continue
		}
		for id := range members {
			if got[id] {
				goto next
			}
		}
		for id := range members {
			if _, ok := still[id]; ok && members[id].Qos > 0 {
				l.lose(key, "no member of the share group %s (%s) got it into its session (%s)",
					group, strings.Join(sortedKeys(members), ","), strings.Join(m.events, "; "))
				break
			}
		}
	next:
	}
}

func (l *ledger) OnQosPublish(cl *mochi.Client, pk packets.Packet, _ int64, resends int) {
	if pk.FixedHeader.Type != packets.Publish || cl.Net.Inline {
		return
	}
	key := msgKey(pk)
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.trail(key)
	what := "stored in"
	if _, ok := m.holders[cl]; ok || pk.FixedHeader.Dup {
		what = "resent to"
	}
	m.holders[cl] = pk.PacketID
	l.byID[holder{cl, pk.PacketID}] = key
	ev := fmt.Sprintf("%s %s as packet %d (resends %d)", what, l.name(cl), pk.PacketID, resends)
	m.events = append(m.events, ev)
	l.logPid(cl, pk.PacketID, ev+": "+key)
}

func (l *ledger) OnQosComplete(cl *mochi.Client, pk packets.Packet) {
	if pk.FixedHeader.Type != packets.Puback && pk.FixedHeader.Type != packets.Pubcomp {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	h := holder{cl, pk.PacketID}
	key, ok := l.byID[h]
	if !ok {
		l.logPid(cl, pk.PacketID, "acknowledged by "+l.name(cl)+", no message held")
		return // an inbound flow of cl's own publish
	}
	m := l.trail(key)
	delete(l.byID, h)
	l.logPid(cl, pk.PacketID, "acknowledged by "+l.name(cl)+": "+key)
	if id, held := m.holders[cl]; !held || id != pk.PacketID {
		return
	}
	m.completed = true
	m.events = append(m.events, fmt.Sprintf("acknowledged by %s (packet %d)", l.name(cl), pk.PacketID))
}

func (l *ledger) OnSessionEstablish(cl *mochi.Client, _ packets.Packet) {
	l.mu.Lock()
	l.takers[cl.ID] = cl
	l.name(cl)
	l.mu.Unlock()
}

func (l *ledger) OnSessionEstablished(cl *mochi.Client, _ packets.Packet) {
	l.mu.Lock()
	if l.takers[cl.ID] == cl {
		delete(l.takers, cl.ID)
	}
	l.mu.Unlock()
}

func (l *ledger) OnDisconnect(cl *mochi.Client, err error, expire bool) {
	l.mu.Lock()
	if l.takers[cl.ID] == cl {
		delete(l.takers, cl.ID)
	}
	l.mu.Unlock()
}

// OnQosDropped accepts the discard of a clean session and the clearing of
// a session taken over by a client that holds the same packet; anything
// else is a loss.
func (l *ledger) OnQosDropped(cl *mochi.Client, pk packets.Packet) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := holder{cl, pk.PacketID}
	key, ok := l.byID[h]
	if !ok {
		return // not a publish to a subscriber (an inbound flow)
	}
	delete(l.byID, h)
	l.logPid(cl, pk.PacketID, "cleared from "+l.name(cl)+": "+key)
	m := l.trail(key)
	if id, held := m.holders[cl]; !held || id != pk.PacketID {
		return
	}
	delete(m.holders, cl)
	if cl.Properties.Clean && cl.Properties.ProtocolVersion < 5 {
		m.events = append(m.events, "discarded with the clean session of "+l.name(cl))
		return
	}
	if t := l.takers[cl.ID]; t != nil && t != cl && t.Properties.Clean {
		m.events = append(m.events, fmt.Sprintf("discarded: %s connected with a clean session", l.name(t)))
		return
	}
	if cl.IsTakenOver() {
		if t := l.takers[cl.ID]; t != nil && t != cl {
			if got, ok := t.State.Inflight.Get(pk.PacketID); ok && msgKey(got) == key {
				m.holders[t] = pk.PacketID
				l.byID[holder{t, pk.PacketID}] = key
				m.events = append(m.events, fmt.Sprintf("moved from %s to %s", l.name(cl), l.name(t)))
				return
			}
			l.lose(key, "packet %d cleared from the session of %s, taken over by %s without it (%s)",
				pk.PacketID, l.name(cl), l.name(t), strings.Join(m.events, "; "))
			return
		}
	}
	l.lose(key, "packet %d dropped from the session of %s (in-flight expiry or clear) (%s)",
		pk.PacketID, l.name(cl), strings.Join(m.events, "; "))
}

func (l *ledger) OnPublishDropped(cl *mochi.Client, pk packets.Packet) {
	if pk.FixedHeader.Qos == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	key := msgKey(pk)
	l.lose(key, "dropped for %s: its outbound queue is full (%s)", l.name(cl), strings.Join(l.trail(key).events, "; "))
}

func (l *ledger) OnPacketIDExhausted(cl *mochi.Client, pk packets.Packet) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lose(msgKey(pk), "dropped for %s: packet ids exhausted", l.name(cl))
}

func (l *ledger) OnClientExpired(cl *mochi.Client) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := cl.State.Inflight.Len(); n > 0 {
		l.lose("", "the session of %s expired with %d messages in flight", l.name(cl), n)
	}
}

// check reports every loss seen, and every message that was put into a
// session, never acknowledged, and is in no current session.
func (l *ledger) check(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	losses := append([]string(nil), l.losses...)
	for key, m := range l.msgs {
		if m.completed || len(m.holders) == 0 {
			continue
		}
		live := false
		for cl, id := range m.holders {
			if cur, ok := l.s.Clients.Get(cl.ID); ok && cur == cl {
				if got, ok := cl.State.Inflight.Get(id); ok && msgKey(got) == key {
					live = true
				}
			}
		}
		if !live {
			var pids []string
			for cl, id := range m.holders {
				pids = append(pids, fmt.Sprintf("packet %d of %s: %s", id, cl.ID, strings.Join(l.pids[pidOf{cl.ID, id}], "; ")))
			}
			losses = append(losses, fmt.Sprintf("message %q: never acknowledged and in no session (%s) [%s]", key,
				strings.Join(m.events, "; "), strings.Join(pids, " | ")))
		}
	}
	sort.Strings(losses)
	for _, s := range losses {
		t.Errorf("embedded MQTT broker lost a message: %s", s)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ledgers holds the ledger of each embedded broker by URL.
var ledgers sync.Map

// Trail says what the embedded broker at url did with the QoS>0 messages
// of payload: who published it, which sessions it was put into, which
// client acknowledged it. It is empty for an external broker.
func Trail(url string, payload []byte) string {
	v, ok := ledgers.Load(url)
	if !ok {
		return ""
	}
	l := v.(*ledger)
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for key, m := range l.msgs {
		if strings.HasSuffix(key, "|"+string(payload)) {
			out = append(out, strings.Join(m.events, "; "))
		}
	}
	if len(out) == 0 {
		return "never published"
	}
	sort.Strings(out)
	return strings.Join(out, " | ")
}
