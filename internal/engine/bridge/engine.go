package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/internal/config"
	"github.com/flechtwerk/flechtwerk/internal/latch"
	"github.com/flechtwerk/flechtwerk/internal/topics"
	"github.com/flechtwerk/flechtwerk/internal/txn"
)

// Point is a place in the cycle where a test hook runs.
type Point int

const (
	// Received: a batch was drained and relayed; nothing of it is
	// committed or acknowledged.
	Received Point = iota
	// Committed: the batch's transaction committed; nothing of it is
	// acknowledged.
	Committed
	// Acked: the batch was acknowledged.
	Acked
)

// hook, when set (tests only, before Run), runs at each Point with the
// topics and payloads of the batch's messages (at Latching: of the
// messages queued).
var hook func(p Point, batch []Message)

// SetHook sets the test hook; tests only, before any Run.
func SetHook(h func(p Point, batch []Message)) { hook = h }

// latchHook, when set (tests only, before Run), runs before the first
// reconciliation with a function that counts the messages queued.
var latchHook func(queued func() int)

// SetLatchHook sets the latch hook; tests only, before any Run.
func SetLatchHook(h func(queued func() int)) { latchHook = h }

func at(p Point, batch []pending) {
	if hook == nil {
		return
	}
	ms := make([]Message, len(batch))
	for i, b := range batch {
		ms[i] = Message{Topic: b.msg.Topic(), Payload: b.msg.Payload()}
	}
	hook(p, ms)
}

// Engine runs one bridge. The runner builds it with New over checked
// options and calls Run once.
type Engine struct {
	o *config.Options
	s Stage
	m *metrics
}

// New returns the engine of s: it checks what the runner's options cannot
// (the application id as a share group, the MQTT settings) and registers
// the metrics. Every problem is a *flechtwerk.ConfigError.
func New(o *config.Options, s Stage) (*Engine, error) {
	var errs []error
	if o.ApplicationID == "" || strings.ContainsAny(o.ApplicationID, "/+#") {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidShareGroup, "ApplicationID",
			"%q is the share group of $share/{group}/{filter}: it must be non-empty and free of '/', '+' and '#'", o.ApplicationID))
	}
	m, err := newMetrics(o.Registerer, o.ApplicationID)
	if err != nil {
		errs = append(errs, flechtwerk.Errorf(flechtwerk.CodeInvalidOption, "Metrics", "registering the MQTT metrics: %v", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Engine{o: o, s: s, m: m}, nil
}

// TransactionalID returns the transactional ID of the bridge of client id
// clientID: {application id}-mqtt-{client id}. A restarted client id
// fences its previous incarnation.
func TransactionalID(app, clientID string) string { return app + "-mqtt-" + clientID }

// pending is one received message on its way to its acknowledgement.
type pending struct {
	msg    paho.Message
	filter string // the matched filter, Unmatched for none
}

// run is the state of one Run.
type run struct {
	e      *Engine
	st     Settings
	log    *slog.Logger
	conn   *conn
	prod   *txn.Producer
	table  *configtopic.Table[any]
	wake   chan struct{}
	fatal  latch.Latch
	cancel context.CancelFunc

	latched bool
	// active maps each subscribed filter to the config that declares it.
	active  map[string]configtopic.Entry[any]
	filters []string // the keys of active, sorted: routing order
	npend   int      // received, not yet acknowledged
}

// Run relays until ctx is canceled (then it finishes the cycle under way,
// disconnects without unsubscribing and returns nil) or an error ends it:
// a lost MQTT connection (wrapping Settings.Disconnected), a failed commit, a config
// record it cannot use. ready is called once the first reconciliation
// subscribed the active configs.
func (e *Engine) Run(ctx context.Context, ready func()) error {
	o := e.o
	rn := &run{e: e, st: e.s.Settings(), log: o.Logger.With("bridge", "mqtt"), wake: make(chan struct{}, 1),
		active: map[string]configtopic.Entry[any]{}}

	admCl, err := kgo.NewClient(o.ClientOpts()...)
	if err != nil {
		return fmt.Errorf("mqtt bridge: admin client: %w", err)
	}
	defer admCl.Close()
	if _, _, err := topics.Describe(ctx, kadm.NewClient(admCl), "config", o.ConfigTopics); err != nil {
		return err
	}
	table, err := configtopic.New[any](
		configtopic.SeedBrokers(o.Brokers...),
		configtopic.Topics(o.ConfigTopics...),
		configtopic.Codec(e.s.DecodeConfig()),
		configtopic.WithKafkaOpts(o.KafkaOpts...),
		configtopic.WithLogger(o.Logger),
	)
	if err != nil {
		return err
	}
	rn.table = table

	// The producer fences the previous incarnation of this client id
	// before anything of this one can be committed.
	// Relayed records carry -1 (the partitioner) or their explicit
	// partition (Output.ToPartition).
	rn.prod, err = txn.OpenRouted(ctx, TransactionalID(o.ApplicationID, rn.st.ClientID), o.TransactionTimeout,
		txn.Routing{Explicit: true}, o.ClientOpts()...)
	if err != nil {
		return fmt.Errorf("mqtt bridge: transactional producer: %w", err)
	}
	defer rn.prod.Close()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	rn.cancel = cancel
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := table.Run(runCtx); err != nil && runCtx.Err() == nil {
			rn.fatal.Set(fmt.Errorf("mqtt bridge: config table: %w", err))
			cancel()
		}
	}()
	defer func() { cancel(); <-done }()

	// Connect first: the persistent session replays its backlog at once,
	// and it is held until the configs are known.
	c, present, err := dial(ctx, rn.st, rn.wake, func() { e.m.connected.Set(0) })
	if err != nil {
		return err
	}
	rn.conn = c
	defer func() {
		c.close()
		e.m.connected.Set(0)
	}()
	e.m.connected.Set(1)
	e.m.session.Set(b2f(present))
	rn.log.Info("mqtt bridge connected", "broker", rn.st.Broker, "client_id", rn.st.ClientID, "session_present", present)

	if err := table.WaitReady(runCtx); err != nil {
		return errors.Join(rn.fatal.Err(), ctxErr(ctx, err))
	}
	err = rn.loop(runCtx, ready)
	if ferr := rn.fatal.Err(); ferr != nil {
		return ferr
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// ctxErr returns nil for the cancellation of ctx, else err.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// loop reconciles and runs cycles until ctx ends or one fails.
func (rn *run) loop(ctx context.Context, ready func()) error {
	var changed <-chan struct{}
	for {
		if !rn.latched || chanClosed(changed) {
			// Taken before the table is read: a change during the
			// reconciliation closes it again.
			changed = rn.table.Changed()
			if !rn.latched && latchHook != nil {
				latchHook(rn.conn.queued)
			}
			if err := rn.reconcile(ctx); err != nil {
				return err
			}
			if !rn.latched {
				// Until now nothing was drained: what the session
				// replayed was held, unacknowledged, in the queue.
				rn.latched = true
				ready()
			}
		}
		if err := rn.conn.err(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if rn.conn.queued() > 0 {
			if err := rn.cycle(ctx); err != nil {
				return err
			}
			continue
		}
		select {
		case <-ctx.Done():
		case <-rn.wake:
		case <-changed:
		}
	}
}

// chanClosed reports whether ch was closed (the table changed since it
// was taken).
func chanClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// reconcile aligns the session's subscriptions with the active configs:
// it subscribes the share form of each new filter (and unsubscribes its
// bare form, so a session of an unshared deployment cannot deliver it
// twice) and unsubscribes the filters no active config declares.
func (rn *run) reconcile(ctx context.Context) error {
	want := map[string]configtopic.Entry[any]{}
	var errs []error
	rn.table.Range(func(en configtopic.Entry[any]) bool {
		f, active, err := rn.e.s.Filter(en)
		switch {
		case err != nil:
			errs = append(errs, err)
		case !active:
		case f == "":
			errs = append(errs, &configtopic.RecordError{Topic: en.Topic, Partition: en.Partition, Offset: en.Offset, Key: en.Key,
				Err: errors.New("the config declares an empty MQTT topic filter")})
		default:
			if prev, dup := want[f]; dup {
				rn.log.Warn("two configs declare one MQTT topic filter; the first key routes it",
					"filter", f, "key", string(prev.Key), "other_key", string(en.Key))
				if string(en.Key) > string(prev.Key) {
					return true
				}
			}
			want[f] = en
		}
		return true
	})
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mqtt bridge: config: %w", err)
	}
	to := rn.st.ConnectTimeout
	for f := range want {
		if _, ok := rn.active[f]; ok {
			continue
		}
		if err := rn.conn.subscribe(ctx, rn.shared(f), rn.st.QoS, to); err != nil {
			return err
		}
		if err := rn.conn.unsubscribe(ctx, to, f); err != nil {
			return err
		}
		rn.log.Info("mqtt bridge subscribed", "filter", rn.shared(f), "qos", rn.st.QoS)
	}
	for f := range rn.active {
		if _, ok := want[f]; ok {
			continue
		}
		if err := rn.conn.unsubscribe(ctx, to, rn.shared(f)); err != nil {
			return err
		}
		rn.log.Info("mqtt bridge unsubscribed", "filter", rn.shared(f))
	}
	rn.active = want
	rn.filters = slices.Sorted(func(yield func(string) bool) {
		for f := range want {
			if !yield(f) {
				return
			}
		}
	})
	rn.e.m.filters.Set(float64(len(want)))
	return nil
}

// shared returns the wire form of filter: $share/{application id}/{filter}.
func (rn *run) shared(filter string) string {
	return "$share/" + rn.e.o.ApplicationID + "/" + filter
}

// route returns the filter that routes topic, "" for none.
func (rn *run) route(topic string) string {
	for _, f := range rn.filters {
		if Match(f, topic) {
			return f
		}
	}
	return ""
}

// cycle drains up to MaxBatch messages, relays them, commits their records
// in one transaction and then acknowledges every message of the batch, in
// arrival order (MQTT 3.1.1 §4.6 asks for PUBACKs in PUBLISH order).
func (rn *run) cycle(ctx context.Context) error {
	m := rn.e.m
	batch := rn.conn.take(rn.st.MaxBatch)
	rn.npend += len(batch)
	m.pending.Set(float64(rn.npend + rn.conn.queued()))
	var (
		acks []pending
		recs []*kgo.Record
		fwd  = map[string]int{}
	)
	for _, msg := range batch {
		f := rn.route(msg.Topic())
		if f == "" {
			// Only cycles after the first reconciliation drain the
			// queue: before it, everything is held unacknowledged.
			m.received.WithLabelValues(Unmatched).Inc()
			rn.log.Warn("mqtt bridge dropping a message no active config declares a filter for", "topic", msg.Topic())
			m.dropped.WithLabelValues(Unmatched, DropStale).Inc()
			acks = append(acks, pending{msg, Unmatched})
			continue
		}
		m.received.WithLabelValues(f).Inc()
		rec, err := rn.e.s.Relay(rn.active[f], Message{Topic: msg.Topic(), Payload: msg.Payload(), QoS: msg.Qos(),
			Duplicate: msg.Duplicate(), Retained: msg.Retained()})
		var defect *DefectError
		switch {
		case errors.As(err, &defect):
			return fmt.Errorf("mqtt bridge: relay of a message of topic %s (filter %s); nothing of the batch acknowledged, the broker delivers it again: %w", msg.Topic(), f, err)
		case err != nil:
			rn.log.Warn("mqtt bridge dropping a poison message", "topic", msg.Topic(), "filter", f, "error", err)
			m.dropped.WithLabelValues(f, DropPoison).Inc()
		case rec == nil:
			m.dropped.WithLabelValues(f, DropFiltered).Inc()
		default:
			recs = append(recs, rec)
			fwd[f]++
		}
		acks = append(acks, pending{msg, f})
	}
	at(Received, acks)
	if len(recs) > 0 {
		// The commit is not cut off by ctx: a stop finishes the cycle.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rn.e.o.TransactionTimeout)
		tm, err := rn.prod.Commit(cctx, recs, nil)
		cancel()
		if err != nil {
			return fmt.Errorf("mqtt bridge: commit of %d records (nothing of the batch acknowledged; the broker delivers it again): %w", len(recs), err)
		}
		m.commits.Inc()
		m.commitDur.Observe(tm.Total.Seconds())
	}
	at(Committed, acks)
	if err := rn.conn.err(); err != nil {
		return err
	}
	for _, a := range acks {
		a.msg.Ack()
	}
	rn.npend -= len(acks)
	for f, n := range fwd {
		m.forwarded.WithLabelValues(f).Add(float64(n))
	}
	m.pending.Set(float64(rn.npend + rn.conn.queued()))
	at(Acked, acks)
	return nil
}

// Match reports whether topic matches the MQTT topic filter (with + and #
// wildcards). Topics starting with $ match no filter that starts with a
// wildcard (MQTT 3.1.1 §4.7.2).
func Match(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	fs, ts := strings.Split(filter, "/"), strings.Split(topic, "/")
	for i, f := range fs {
		if f == "#" {
			return true
		}
		if i >= len(ts) {
			return false
		}
		if f != "+" && f != ts[i] {
			return false
		}
	}
	return len(fs) == len(ts)
}
