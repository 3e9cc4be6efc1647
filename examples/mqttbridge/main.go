// Command mqttbridge relays the readings of MQTT devices into Kafka with
// the MQTT→Kafka bridge: a message is acknowledged to the MQTT broker only
// after the Kafka transaction holding its record committed.
//
// One config record per site names the MQTT topic filter of its devices
// (sites/{site}/+/temp). The relay turns each JSON reading into a record
// keyed by device, and drops readings it cannot parse as poison (counted
// and acknowledged, so they never wedge the session).
//
// With no flags it starts embedded brokers (kfake for Kafka, mochi-mqtt for
// MQTT), creates the topics, writes the config records, publishes -n
// readings (and a few poison ones), waits until every reading is in Kafka
// (read_committed), prints a summary and exits 0 (1 when a reading is
// missing):
//
//	go run ./examples/mqttbridge
//
// With -brokers and -mqtt it runs against real brokers (Mosquitto 2:
// tcp://127.0.0.1:1883); a second run with the same -client-id resumes
// its persistent session:
//
//	go run ./examples/mqttbridge -brokers localhost:9092 -mqtt tcp://localhost:1883
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/mqttbridge"
	"github.com/flechtwerk/flechtwerk/runner"
)

// Site is the config record of one site: the topic filter of its devices.
type Site struct {
	Filter string `json:"filter"`
}

// Reading is what a device publishes.
type Reading struct {
	Device string  `json:"device"`
	Temp   float64 `json:"temp"`
	Seq    int     `json:"seq"`
}

// relay keys each reading by device; an unparsable one is poison.
func relay(out string) mqttbridge.Relay[Site] {
	return func(cfg mqttbridge.Config[Site], m mqttbridge.Message) (*mqttbridge.Output, error) {
		var r Reading
		if err := json.Unmarshal(m.Payload, &r); err != nil {
			return nil, fmt.Errorf("reading on %s: %w", m.Topic, err)
		}
		return &mqttbridge.Output{Topic: out, Key: []byte(r.Device), Value: m.Payload,
			Headers: []mqttbridge.Header{{Key: "site", Value: cfg.Key}}}, nil
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mqttbridge:", err)
		os.Exit(1)
	}
}

func run() error {
	brokers := flag.String("brokers", "", "Kafka seed brokers (default: an embedded broker)")
	mqttURL := flag.String("mqtt", "", "MQTT broker URL (default: an embedded broker)")
	clientID := flag.String("client-id", "bridge-0", "MQTT client id (stable per instance)")
	n := flag.Int("n", 1000, "readings to publish")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	if *brokers == "" {
		fc, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return err
		}
		defer fc.Close()
		*brokers = fc.ListenAddrs()[0]
	}
	if *mqttURL == "" {
		url, closeMQTT, err := embeddedMQTT()
		if err != nil {
			return err
		}
		defer closeMQTT()
		*mqttURL = url
	}

	const sites, out, app = "mqtt-sites", "readings", "mqtt-readings"
	if err := createTopics(ctx, *brokers, map[string]int32{sites: 1, out: 3}); err != nil {
		return err
	}
	if err := writeSites(ctx, *brokers, sites, "north", "south"); err != nil {
		return err
	}

	b := mqttbridge.New(func(s Site) string { return s.Filter }, relay(out),
		mqttbridge.Broker(*mqttURL), mqttbridge.ClientID(*clientID))
	r, err := runner.NewBridge(b, runner.SeedBrokers(*brokers), runner.ApplicationID(app),
		runner.ConfigTopics(sites), runner.WithLogger(logger))
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	for r.Ready() != nil {
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("bridge ended before it was ready: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}

	began := time.Now()
	if err := publish(*mqttURL, *n); err != nil {
		return err
	}
	got, err := readAll(ctx, *brokers, out, *n)
	if err != nil {
		return err
	}
	missing := 0
	for i := range *n {
		if got[i] == 0 {
			missing++
		}
	}
	fmt.Printf("published %d readings (and 3 poison messages) to MQTT; %d distinct readings in Kafka topic %s (read_committed) after %v; missing %d\n",
		*n, len(got), out, time.Since(began).Round(time.Millisecond), missing)
	if missing > 0 {
		return errors.New("readings missing")
	}
	return nil
}

// embeddedMQTT starts an MQTT broker on a free loopback port.
func embeddedMQTT() (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	s := mochi.New(&mochi.Options{Logger: slog.New(slog.DiscardHandler)})
	if err := s.AddHook(new(allowAll), nil); err != nil {
		return "", nil, err
	}
	if err := s.AddListener(listeners.NewTCP(listeners.Config{ID: "example", Address: addr})); err != nil {
		return "", nil, err
	}
	if err := s.Serve(); err != nil {
		return "", nil, err
	}
	return "tcp://" + addr, func() { _ = s.Close() }, nil
}

// allowAll lets every client connect and use every topic (example only).
type allowAll struct{ mochi.HookBase }

func (*allowAll) ID() string { return "allow-all" }
func (*allowAll) Provides(b byte) bool {
	return b == mochi.OnConnectAuthenticate || b == mochi.OnACLCheck
}
func (*allowAll) OnConnectAuthenticate(*mochi.Client, packets.Packet) bool { return true }
func (*allowAll) OnACLCheck(*mochi.Client, string, bool) bool              { return true }

func createTopics(ctx context.Context, brokers string, topics map[string]int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for t, p := range topics {
		if _, err := adm.CreateTopic(ctx, p, -1, nil, t); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create %s: %w", t, err)
		}
	}
	return nil
}

func writeSites(ctx context.Context, brokers, topic string, sites ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return err
	}
	defer cl.Close()
	for _, s := range sites {
		v, _ := json.Marshal(Site{Filter: "sites/" + s + "/+/temp"})
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(s), Value: v}).FirstErr(); err != nil {
			return err
		}
	}
	return nil
}

// publish sends n readings, spread over two sites and four devices, and
// three poison payloads, at QoS 1.
func publish(url string, n int) error {
	cl := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID("example-devices").SetCleanSession(true))
	if tok := cl.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		return fmt.Errorf("publisher connect: %v", tok.Error())
	}
	defer cl.Disconnect(250)
	site := []string{"north", "south"}
	var last paho.Token
	for i := range n {
		dev := fmt.Sprintf("dev%d", i%4)
		v, _ := json.Marshal(Reading{Device: dev, Temp: 20 + float64(i%10)/10, Seq: i})
		last = cl.Publish(fmt.Sprintf("sites/%s/%s/temp", site[i%2], dev), 1, false, v)
		if i%3 == 0 && i/3 < 3 {
			cl.Publish("sites/north/dev0/temp", 1, false, []byte("{not json"))
		}
	}
	if last != nil && (!last.WaitTimeout(30*time.Second) || last.Error() != nil) {
		return fmt.Errorf("publish: %v", last.Error())
	}
	return nil
}

// readAll reads out (read_committed) until it holds every seq below n or
// 60s pass, and returns the copies per seq.
func readAll(ctx context.Context, brokers, topic string, n int) (map[int]int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	got := map[int]int{}
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return got, nil
		}
		fs.EachRecord(func(r *kgo.Record) {
			var rd Reading
			if json.Unmarshal(r.Value, &rd) == nil && rd.Seq < n {
				got[rd.Seq]++
			}
		})
	}
	return got, nil
}
