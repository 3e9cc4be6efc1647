package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// env is the broker of one benchmark run and the clients the harness uses.
type env struct {
	kind      string // "kafka" or "kfake"
	brokers   []string
	brokerPID int // the broker's process (0: none, kfake runs in this process)
	// child is a process whose CPU counts as this process's: the Kafka
	// Streams JVM of a row (0: none).
	child atomic.Int64
	adm   *kadm.Client
	cl    *kgo.Client
	seq   int
	runID string
}

func newEnv(kind string, brokers []string, brokerPID int) (*env, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	return &env{kind: kind, brokers: brokers, brokerPID: brokerPID, cl: cl, adm: kadm.NewClient(cl),
		runID: strconv.FormatInt(time.Now().UnixNano()%1e9, 36)}, nil
}

func (e *env) close() { e.cl.Close() }

// name returns a topic or group name unique to this run.
func (e *env) name(prefix string) string {
	e.seq++
	return fmt.Sprintf("bench-%s-%s-%d", prefix, e.runID, e.seq)
}

// createTopic creates topic and waits until every partition lists offsets.
func (e *env) createTopic(ctx context.Context, topic string, partitions int32, compact bool) error {
	var cfg map[string]*string
	if compact {
		p := "compact"
		cfg = map[string]*string{"cleanup.policy": &p}
	}
	return e.createTopicWith(ctx, topic, partitions, cfg)
}

// createTopicWith creates topic with the topic configs cfg and waits until
// every partition has a leader.
func (e *env) createTopicWith(ctx context.Context, topic string, partitions int32, cfg map[string]*string) error {
	resp, err := e.adm.CreateTopic(ctx, partitions, -1, cfg, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("creating topic %s: %w", topic, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ends, err := e.adm.ListEndOffsets(ctx, topic)
		ok := err == nil
		n := 0
		if ok {
			ends.Each(func(o kadm.ListedOffset) {
				if o.Err != nil {
					ok = false
				}
				n++
			})
		}
		if ok && int32(n) == partitions {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s: partitions not ready after 30s (listed %d, err %v)", topic, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// committed returns the group's committed offsets of topic by partition.
func (e *env) committed(ctx context.Context, group, topic string) (map[int32]int64, error) {
	resp, err := e.adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) || kerr.IsRetriable(err) {
		return map[int32]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fetching offsets of group %s: %w", group, err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out, nil
}

// endOffsets returns the high watermarks of topic.
func (e *env) endOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	ends, err := e.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("listing end offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = fmt.Errorf("end offset of %s/%d: %w", topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out, lerr
}

// waitCommitted polls the group's committed offsets of topic every 10 ms
// until they reach want, the processor ends (errc), or timeout passes.
func (e *env) waitCommitted(ctx context.Context, group, topic string, want map[int32]int64, errc <-chan error, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := e.committed(ctx, group, topic)
		if err != nil {
			return err
		}
		ok := true
		for p, end := range want {
			if got[p] < end {
				ok = false
			}
		}
		if ok {
			return nil
		}
		select {
		case err := <-errc:
			return fmt.Errorf("processor of group %s ended while draining: %v (committed %v, want %v)", group, err, got, want)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("group %s not drained after %v: committed %v, want %v", group, timeout, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countCommitted counts the committed data records of topic (read_committed,
// up to the last stable offsets listed now).
func (e *env) countCommitted(ctx context.Context, topic string) (int, error) {
	lso, err := e.adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	want := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	lso.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			offsets[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return 0, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords())
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	n := 0
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("reading %s: partitions %v not read: %w", topic, want, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("fetch %s/%d: %w", t, p, err) })
		if ferr != nil {
			return n, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := want[r.Partition]; ok && r.Offset < end {
				if !r.Attrs.IsControl() {
					n++
				}
				if r.Offset >= end-1 {
					delete(want, r.Partition)
				}
			}
		})
	}
	return n, nil
}

// producer returns a plain idempotent producer that writes each record to
// its explicit partition.
func (e *env) producer(extra ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.brokers...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxBufferedRecords(100_000),
	}, extra...)...)
}

// Input records carry the time they were produced (UnixNano, big endian)
// in this header; every processor copies it to its outputs.
const timeHeader = "t"

func timeValue(t time.Time) []byte { return binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano())) }

func headerTime(r *kgo.Record) (time.Time, bool) {
	for _, h := range r.Headers {
		if h.Key == timeHeader {
			if ns, ok := timeNanos(h.Value); ok {
				return time.Unix(0, ns), true
			}
		}
	}
	return time.Time{}, false
}

// timeNanos decodes a timeHeader value (see timeValue).
func timeNanos(v []byte) (int64, bool) {
	if len(v) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

// keyOf returns the key of record i and its partition: key k lives on
// partition k % partitions.
func keyOf(i, keys int, partitions int32) ([]byte, int32) {
	k := i % keys
	return []byte("k" + strconv.Itoa(k)), int32(k) % partitions
}

// keyPartitioner places a key where franz-go's (and the Java client's)
// default partitioner does, murmur2 of the key: the partition the runner
// sends an output with that key to.
var keyPartitioner = kgo.StickyKeyPartitioner(nil).ForTopic("")

// keyOfCopartitioned is keyOf with key k on the partition the default
// partitioner picks for it, so that the outputs (keyed by the input's key)
// go to the partition of the same number as their input.
func keyOfCopartitioned(i, keys int, partitions int32) ([]byte, int32) {
	key, _ := keyOf(i, keys, partitions)
	return key, int32(keyPartitioner.Partition(&kgo.Record{Key: key}, int(partitions)))
}

// produceInputs writes n records over keys to topic, partition by key, and
// returns the offsets each partition ends at.
func (e *env) produceInputs(ctx context.Context, topic string, n, keys int, partitions int32) (map[int32]int64, error) {
	cl, err := e.producer(kgo.ProducerLinger(5 * time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var (
		mu   sync.Mutex
		perr error
	)
	ends := map[int32]int64{}
	for i := range n {
		key, p := keyOf(i, keys, partitions)
		ends[p]++
		r := &kgo.Record{Topic: topic, Partition: p, Key: key, Value: strconv.AppendInt(nil, int64(i), 10),
			Headers: []kgo.RecordHeader{{Key: timeHeader, Value: timeValue(time.Now())}}}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				perr = errors.Join(perr, err)
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return nil, err
	}
	if perr != nil {
		return nil, fmt.Errorf("producing inputs to %s: %w", topic, perr)
	}
	return ends, nil
}

// cpu is a snapshot of this process's and the broker's CPU time.
type cpu struct {
	at       time.Time
	self     time.Duration
	broker   time.Duration
	brokerOK bool
	// machine is the CPU time all processes of the machine used
	// (/proc/stat); machineOK when it was read.
	machine   time.Duration
	machineOK bool
}

// procCPU returns the user and system CPU time of process pid so far.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// Fields after the command (which may hold spaces): state is field 3,
	// utime 14, stime 15, in clock ticks (100 Hz).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) <= 13 {
		return 0, false
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond, true
}

func (e *env) cpuNow() cpu {
	c := cpu{at: time.Now()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if e.brokerPID > 0 {
		c.broker, c.brokerOK = procCPU(e.brokerPID)
	}
	if pid := e.child.Load(); pid > 0 {
		if d, ok := procCPU(int(pid)); ok {
			c.self += d
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		// "cpu  user nice system idle iowait irq softirq steal ...", in
		// clock ticks (100 Hz): busy is everything but idle and iowait.
		line, _, _ := strings.Cut(string(b), "\n")
		if f := strings.Fields(line); len(f) > 8 && f[0] == "cpu" {
			var busy int64
			for i, v := range f[1:9] {
				if i == 3 || i == 4 {
					continue
				}
				n, _ := strconv.ParseInt(v, 10, 64)
				busy += n
			}
			c.machine = time.Duration(busy) * 10 * time.Millisecond
			c.machineOK = true
		}
	}
	return c
}

// machineCores returns the CPU cores all processes of the machine used
// between a and b (-1 when unknown).
func machineCores(a, b cpu) float64 {
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 || !a.machineOK || !b.machineOK {
		return -1
	}
	return (b.machine - a.machine).Seconds() / wall
}

// cores returns the CPU cores used between a and b, by this process and by
// the broker process (-1 when unknown).
func cores(a, b cpu) (self, broker float64) {
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return 0, -1
	}
	self = (b.self - a.self).Seconds() / wall
	broker = -1
	if a.brokerOK && b.brokerOK {
		broker = (b.broker - a.broker).Seconds() / wall
	}
	return self, broker
}
