package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/internal/txn"
	"github.com/flechtwerk/flechtwerk/store"
)

// The warm-restart benchmark (-warm N): one task's changelog partition
// holding N keys of 100-byte values, then
//   - a plain read_committed read of the partition (the baseline),
//   - a cold restore (changelog.Recover into an empty store),
//   - a child process that opens that store, commits one transaction of
//     1000 state writes the way a task does (ApplyThrough) and is killed
//     with SIGKILL; another owner commits 1000 more,
//   - the warm restart on the killed child's directory: fence, open,
//     Recover, timed from the fence to the restored store.
var (
	warmKeys    = flag.Int("warm", 0, "run only the warm-restart benchmark with this many keys of 100 bytes (0: skip)")
	warmProfile = flag.String("warm-cpuprofile", "", "write a CPU profile of the cold restore to this file")
)

const warmChildEnv = "EOSBENCH_WARM_CHILD"

func init() {
	if spec := os.Getenv(warmChildEnv); spec != "" {
		os.Exit(warmChild(spec))
	}
}

func runWarm(ctx context.Context, e *env, n int) error {
	app := e.name("warm")
	topic := changelog.Topic(app)
	if err := e.createTopic(ctx, topic, 1, true); err != nil {
		return err
	}
	opts := []kgo.Opt{kgo.SeedBrokers(e.brokers...)}
	t0 := time.Now()
	if err := commitInto(ctx, app, nil, 0, n, 50_000, opts); err != nil {
		return err
	}
	logf("warm: wrote %d keys to %s/0 in %v", n, topic, time.Since(t0).Round(time.Millisecond))

	// Baseline: a plain read_committed read.
	cl, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return err
	}
	t0 = time.Now()
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if err := pollErr(fs); err != nil {
			cl.Close()
			return err
		}
		got += fs.NumRecords()
	}
	plain := time.Since(t0)
	cl.Close()

	dir, err := os.MkdirTemp("", "eosbench-warm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(ctx, store.Dir(dir, app, 0), store.Options{ApplicationID: app})
	if err != nil {
		return err
	}
	if *warmProfile != "" {
		f, err := os.Create(*warmProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	t0 = time.Now()
	res, err := changelog.Recover(ctx, e.adm, topic, 0, st, opts...)
	cold := time.Since(t0)
	if *warmProfile != "" {
		pprof.StopCPUProfile()
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if res.Records != n || !res.Full {
		return fmt.Errorf("cold restore applied %d records (full %v), want %d", res.Records, res.Full, n)
	}
	logf("warm: plain read %v (%.0f records/s), cold restore %v (%.0f records/s), ratio %.2f",
		plain.Round(time.Millisecond), float64(n)/plain.Seconds(), cold.Round(time.Millisecond), float64(n)/cold.Seconds(), plain.Seconds()/cold.Seconds())

	// A child owner commits and is killed.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.Command(self)
	child.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%s|%d", warmChildEnv, strings.Join(e.brokers, ","), app, dir, n))
	child.Stderr = os.Stderr
	stdout, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	if err := child.Start(); err != nil {
		return err
	}
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "ready" {
		_ = child.Process.Kill()
		_ = child.Wait()
		return fmt.Errorf("warm child: %q", out.Text())
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	_ = child.Wait()
	// Another owner commits a tail of 1000 writes.
	if err := commitInto(ctx, app, nil, n, 1000, 1000, opts); err != nil {
		return err
	}

	// The warm restart: fence, open, recover.
	t0 = time.Now()
	p, err := txn.Open(ctx, app+"-0", time.Minute, topic, opts...)
	if err != nil {
		return err
	}
	defer p.Close()
	fenced := time.Since(t0)
	st, err = store.Open(ctx, store.Dir(dir, app, 0), store.Options{ApplicationID: app})
	if err != nil {
		return err
	}
	opened := time.Since(t0)
	res, err = changelog.Recover(ctx, e.adm, topic, 0, st, opts...)
	warm := time.Since(t0)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if res.Full {
		return fmt.Errorf("warm restart restored in full: %s", res.Reason)
	}
	logf("warm: restart after SIGKILL %v (fence %v, store open %v, replayed %d records from %d to %d); cold restore %v",
		warm.Round(time.Millisecond), fenced.Round(time.Millisecond), (opened - fenced).Round(time.Millisecond),
		res.Records, res.From, res.To, cold.Round(time.Millisecond))
	fmt.Printf("warm restart bench (%s, %d keys of 100 bytes): plain read %v, cold restore %v (%.2f× plain), warm restart after SIGKILL %v replaying %d records\n",
		e.kind, n, plain.Round(time.Millisecond), cold.Round(time.Millisecond), plain.Seconds()/cold.Seconds(), warm.Round(time.Millisecond), res.Records)
	return nil
}

// commitInto commits n puts of keys first..first+n-1 (100-byte values) to
// partition 0 of app's changelog as {app}-0, in transactions of per; with
// st set, each transaction is applied to it with its checkpoint, the way
// a task commits.
func commitInto(ctx context.Context, app string, st *store.Store, first, n, per int, opts []kgo.Opt) error {
	topic := changelog.Topic(app)
	p, err := txn.Open(ctx, app+"-0", time.Minute, topic, append(opts, kgo.MaxBufferedRecords(per+1), kgo.ProducerLinger(5*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer p.Close()
	value := make([]byte, 100)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	for at := first; at < first+n; at += per {
		end := min(at+per, first+n)
		ws := make([]store.Write, 0, end-at)
		recs := make([]*kgo.Record, 0, end-at)
		for i := at; i < end; i++ {
			w := store.Write{Key: fmt.Appendf(nil, "key-%09d", i), Value: value}
			ws = append(ws, w)
			recs = append(recs, changelog.Record(topic, 0, w))
		}
		if _, err := p.Commit(ctx, recs, nil); err != nil {
			return err
		}
		if st != nil {
			next, ok := changelog.NextOffset(recs, topic, 0)
			if !ok {
				return errors.New("no changelog offset")
			}
			if err := st.ApplyThrough(ws, next); err != nil {
				return err
			}
		}
	}
	return nil
}

// warmChild: "brokers|app|dir|n": open the store, recover (warm), commit
// 1000 writes with checkpoints, say "ready", wait for SIGKILL.
func warmChild(spec string) int {
	parts := strings.Split(spec, "|")
	var n int
	fmt.Sscan(parts[3], &n)
	app, dir := parts[1], parts[2]
	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(parts[0], ",")...)}
	ctx := context.Background()
	fail := func(err error) int { fmt.Println("error:", err); return 1 }
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fail(err)
	}
	p, err := txn.Open(ctx, app+"-0", time.Minute, changelog.Topic(app), opts...)
	if err != nil {
		return fail(err)
	}
	p.Close()
	st, err := store.Open(ctx, filepath.Join(dir, app, "0"), store.Options{ApplicationID: app})
	if err != nil {
		return fail(err)
	}
	res, err := changelog.Recover(ctx, kadm.NewClient(cl), changelog.Topic(app), 0, st, opts...)
	if err != nil {
		return fail(err)
	}
	if res.Full {
		return fail(fmt.Errorf("child restored in full: %s", res.Reason))
	}
	if err := commitInto(ctx, app, st, n+5000, 1000, 1000, opts); err != nil {
		return fail(err)
	}
	fmt.Println("ready")
	select {}
}
