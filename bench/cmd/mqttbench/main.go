// Command mqttbench measures MQTT→Kafka bridges on the same brokers in one
// run: this project's bridge (package mqttbridge, in-process) and the
// Python library's (flechtwerk 0.17.0, flechtwerk.mqtt, a subprocess,
// bench/mqtt/pybridge.py). bench/mqtt/run.sh starts the brokers (Apache
// Kafka and Mosquitto 2) and runs it.
//
// For each bridge: (1) the drain rate: -n messages published at QoS 1 as
// fast as the MQTT broker takes them, timed from the first publish until a
// read_committed reader saw every one; (2) latency: a steady publisher at
// half of our bridge's drain rate for -duration, each message's time from
// publish to visible to a read_committed reader (p50, p99, max), and
// whether the bridge kept up. The ratio of the drain rates is printed last.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/mqttbridge"
	"github.com/flechtwerk/flechtwerk/runner"
)

type conf struct {
	Topic string `json:"topic"`
}

type payload struct {
	Seq int   `json:"seq"`
	TS  int64 `json:"ts"`
}

var (
	brokers  = flag.String("brokers", "", "Kafka bootstrap servers")
	mqttURL  = flag.String("mqtt", "", "MQTT broker URL (tcp://host:port)")
	python   = flag.String("python", "", "python with flechtwerk[mqtt]==0.17.0 (empty: skip the Python bridge)")
	pyScript = flag.String("pybridge", "bench/mqtt/pybridge.py", "the Python bridge program")
	n        = flag.Int("n", 20000, "messages of the drain row")
	duration = flag.Duration("duration", 10*time.Second, "length of the latency row")
	topics   = flag.Int("topics", 8, "MQTT topics the publisher spreads over (one filter covers them)")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mqttbench:", err)
		os.Exit(1)
	}
}

type result struct {
	name              string
	rate              float64
	latRate           float64
	p50, p99, max     time.Duration
	seen, sent        int
	drainDur, latWall time.Duration
}

func run() error {
	ctx := context.Background()
	var results []result
	goRes, err := bench(ctx, "go", 0)
	if err != nil {
		return fmt.Errorf("go bridge: %w", err)
	}
	results = append(results, goRes)
	if *python != "" {
		pyRes, err := bench(ctx, "python", goRes.rate/2)
		if err != nil {
			return fmt.Errorf("python bridge: %w", err)
		}
		results = append(results, pyRes)
	}
	fmt.Printf("\n%-8s %14s %12s %10s %10s %10s %s\n", "bridge", "drain msg/s", "latency at", "p50", "p99", "max", "seen/sent")
	for _, r := range results {
		fmt.Printf("%-8s %14.0f %10.0f/s %10v %10v %10v %d/%d\n", r.name, r.rate, r.latRate,
			r.p50.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond), r.max.Round(time.Millisecond), r.seen, r.sent)
	}
	if len(results) == 2 {
		fmt.Printf("drain ratio go/python: %.2f\n", results[0].rate/results[1].rate)
	}
	return nil
}

// bench runs both rows for one bridge; latRate 0: half of its own drain
// rate.
func bench(ctx context.Context, kind string, latRate float64) (result, error) {
	res := result{name: kind}
	suffix := fmt.Sprintf("%s-%d", kind, time.Now().UnixNano())
	app, cfgTopic, out, base := "mqttbench-"+suffix, "mqttbench-cfg-"+suffix, "mqttbench-out-"+suffix, "bench/"+suffix
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...))
	if err != nil {
		return res, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, -1, nil, cfgTopic); err != nil {
		return res, err
	}
	if _, err := adm.CreateTopic(ctx, 3, -1, nil, out); err != nil {
		return res, err
	}
	v, _ := json.Marshal(conf{Topic: base + "/#"})
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: cfgTopic, Key: []byte("all"), Value: v}).FirstErr(); err != nil {
		return res, err
	}

	stop, err := startBridge(kind, app, cfgTopic, out)
	if err != nil {
		return res, err
	}
	defer stop()

	rd, err := newReader(out)
	if err != nil {
		return res, err
	}
	defer rd.close()
	pub, err := newPublisher()
	if err != nil {
		return res, err
	}
	defer pub.Disconnect(250)

	// Warm up until a message goes through.
	seq := 0
	deadline := time.Now().Add(120 * time.Second)
	for rd.count() == 0 {
		if time.Now().After(deadline) {
			return res, errors.New("no message reached Kafka within 120s")
		}
		publish(pub, base, seq)
		seq++
		time.Sleep(200 * time.Millisecond)
	}
	for range 500 {
		publish(pub, base, seq)
		seq++
	}
	rd.waitCount(seq, 60*time.Second)

	// (1) drain: n messages as fast as the broker takes them.
	first := seq
	rd.reset()
	began := time.Now()
	var last paho.Token
	for i := range *n {
		last = publish(pub, base, first+i)
	}
	last.Wait()
	if !rd.waitCount(*n, 300*time.Second) {
		return res, fmt.Errorf("drain: %d of %d messages after 300s", rd.count(), *n)
	}
	res.drainDur = time.Since(began)
	res.rate = float64(*n) / res.drainDur.Seconds()
	seq = first + *n
	fmt.Fprintf(os.Stderr, "%s: drained %d messages in %v: %.0f msg/s\n", kind, *n, res.drainDur.Round(time.Millisecond), res.rate)

	// (2) latency at latRate.
	if latRate == 0 {
		latRate = res.rate / 2
	}
	res.latRate = latRate
	rd.reset()
	total := int(latRate * duration.Seconds())
	interval := time.Duration(float64(time.Second) / latRate)
	began = time.Now()
	for i := range total {
		if d := time.Until(began.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		publish(pub, base, seq+i)
	}
	rd.waitCount(total, 30*time.Second)
	res.latWall = time.Since(began)
	res.seen, res.sent = rd.count(), total
	lats := rd.latencies()
	if len(lats) > 0 {
		slices.Sort(lats)
		res.p50, res.p99, res.max = lats[len(lats)/2], lats[len(lats)*99/100], lats[len(lats)-1]
	}
	fmt.Fprintf(os.Stderr, "%s: latency at %.0f msg/s: p50 %v p99 %v (%d/%d seen)\n", kind, latRate, res.p50, res.p99, res.seen, res.sent)
	return res, nil
}

func startBridge(kind, app, cfgTopic, out string) (func(), error) {
	switch kind {
	case "go":
		b := mqttbridge.New(func(c conf) string { return c.Topic },
			func(_ mqttbridge.Config[conf], m mqttbridge.Message) (*mqttbridge.Output, error) {
				return &mqttbridge.Output{Topic: out, Key: []byte(m.Topic), Value: m.Payload}, nil
			}, mqttbridge.Broker(*mqttURL), mqttbridge.ClientID(app+"-0"))
		reg := prometheus.NewRegistry()
		r, err := runner.NewBridge(b, runner.SeedBrokers(strings.Split(*brokers, ",")...), runner.ApplicationID(app), runner.Metrics(reg),
			runner.ConfigTopics(cfgTopic), runner.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				fmt.Fprintln(os.Stderr, "go bridge:", err)
			}
			commits(reg)
		}, nil
	default:
		u, err := url.Parse(*mqttURL)
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(*python, *pyScript, *brokers, u.Hostname(), u.Port(), app, app+"-0", cfgTopic, out)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		return func() {
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}, nil
	}
}

func newPublisher() (paho.Client, error) {
	cl := paho.NewClient(paho.NewClientOptions().AddBroker(*mqttURL).SetClientID(fmt.Sprintf("mqttbench-pub-%d", time.Now().UnixNano())).
		SetCleanSession(true).SetOrderMatters(false).SetMaxResumePubInFlight(1000))
	tok := cl.Connect()
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		return nil, fmt.Errorf("publisher connect: %v", tok.Error())
	}
	return cl, nil
}

var pubTokens = make(chan paho.Token, 2000)

// publish sends message seq at QoS 1, with at most 2000 unacknowledged.
func publish(cl paho.Client, base string, seq int) paho.Token {
	v, _ := json.Marshal(payload{Seq: seq, TS: time.Now().UnixNano()})
	tok := cl.Publish(fmt.Sprintf("%s/t%d", base, seq%*topics), 1, false, v)
	select {
	case pubTokens <- tok:
	default:
		(<-pubTokens).Wait()
		pubTokens <- tok
	}
	return tok
}

// reader counts the distinct messages visible to a read_committed reader
// and their latencies.
type reader struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	seen map[int]bool
	lats []time.Duration
	n    atomic.Int64
}

func newReader(topic string) (*reader, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &reader{cl: cl, cancel: cancel, done: make(chan struct{}), seen: map[int]bool{}}
	go func() {
		defer close(r.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now().UnixNano()
			r.mu.Lock()
			fs.EachRecord(func(rec *kgo.Record) {
				var p payload
				if json.Unmarshal(rec.Value, &p) != nil || r.seen[p.Seq] {
					return
				}
				r.seen[p.Seq] = true
				r.lats = append(r.lats, time.Duration(now-p.TS))
				r.n.Add(1)
			})
			r.mu.Unlock()
		}
	}()
	return r, nil
}

func (r *reader) count() int { return int(r.n.Load()) }

func (r *reader) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lats = nil
	r.n.Store(0)
}

func (r *reader) latencies() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lats)
}

func (r *reader) waitCount(k int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for r.count() < k {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

func (r *reader) close() {
	r.cancel()
	<-r.done
	r.cl.Close()
}

// commits prints the bridge's commit count and mean commit duration.
func commits(g prometheus.Gatherer) {
	mfs, err := g.Gather()
	if err != nil {
		return
	}
	for _, mf := range mfs {
		if mf.GetName() != "flechtwerk_mqtt_commit_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if h.GetSampleCount() > 0 {
				fmt.Fprintf(os.Stderr, "go: %d commits, mean %.1fms\n", h.GetSampleCount(),
					1000*h.GetSampleSum()/float64(h.GetSampleCount()))
			}
		}
	}
}
