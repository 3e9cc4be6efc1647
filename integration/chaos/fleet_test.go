package chaos

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fleet supervises the processor processes of one chaos run: slot i always
// runs one process (generation g, client id "chaos-i-g"). A process the
// harness did not kill that exits is logged and restarted, as an
// orchestrator would.
type fleet struct {
	t    testing.TB
	bin  string
	dir  string // logs and state directories
	args func(slot, gen int) []string

	mu      sync.Mutex
	slots   []*proc
	closing bool
	exits   []exitInfo // unexpected exits
	wg      sync.WaitGroup

	kills atomic.Int64
}

// proc is one process of a slot.
type proc struct {
	slot, gen int
	clientID  string
	cmd       *exec.Cmd
	log       string
	started   time.Time
	exited    chan struct{}
	err       error // Wait's result, set before exited closes
	expected  atomic.Bool
	stopped   atomic.Bool // SIGSTOPped
}

type exitInfo struct {
	slot, gen int
	err       error
	tail      string
}

func newFleet(t testing.TB, bin, dir string, args func(slot, gen int) []string) *fleet {
	f := &fleet{t: t, bin: bin, dir: dir, args: args}
	t.Cleanup(f.close)
	return f
}

// start starts slot's next generation.
func (f *fleet) start(slot int) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.slots) <= slot {
		f.slots = append(f.slots, nil)
	}
	gen := 0
	if old := f.slots[slot]; old != nil {
		gen = old.gen + 1
	}
	p := &proc{
		slot: slot, gen: gen, clientID: clientID(slot, gen),
		log:    filepath.Join(f.dir, fmt.Sprintf("slot%d-gen%d.log", slot, gen)),
		exited: make(chan struct{}),
	}
	f.slots[slot] = p
	if f.closing {
		close(p.exited)
		return p
	}
	logf, err := os.Create(p.log)
	if err != nil {
		f.t.Errorf("chaos: log file: %v", err)
		close(p.exited)
		return p
	}
	p.cmd = exec.Command(f.bin, append(f.args(slot, gen), "-client-id", p.clientID)...)
	p.cmd.Stdout = logf
	p.cmd.Stderr = logf
	// Die with the test binary even if it is killed itself.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		f.t.Errorf("chaos: starting %s: %v", f.bin, err)
		close(p.exited)
		return p
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		p.err = p.cmd.Wait()
		logf.Close()
		close(p.exited)
		if p.expected.Load() {
			return
		}
		f.mu.Lock()
		closing := f.closing
		if !closing {
			f.exits = append(f.exits, exitInfo{slot: p.slot, gen: p.gen, err: p.err, tail: tail(p.log, 6)})
		}
		f.mu.Unlock()
		if closing {
			return
		}
		f.t.Logf("chaos: slot %d gen %d exited by itself (%v); restarting. Last lines:\n%s", p.slot, p.gen, p.err, tail(p.log, 6))
		time.Sleep(200 * time.Millisecond)
		f.restartIfCurrent(p)
	}()
	return p
}

func (f *fleet) restartIfCurrent(p *proc) {
	f.mu.Lock()
	cur := f.slots[p.slot] == p && !f.closing
	f.mu.Unlock()
	if cur {
		f.start(p.slot)
	}
}

func clientID(slot, gen int) string { return fmt.Sprintf("chaos-%d-%d", slot, gen) }

// current returns slot's running process.
func (f *fleet) current(slot int) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.slots[slot]
}

// procs returns every slot's current process.
func (f *fleet) procs() []*proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*proc(nil), f.slots...)
}

// byClientID returns the current process with client id id, or nil (a
// member of an earlier, dead generation).
func (f *fleet) byClientID(id string) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.slots {
		if p != nil && p.clientID == id {
			return p
		}
	}
	return nil
}

// kill SIGKILLs p, waits for it to die and, once before returns, starts
// its slot's next generation. It reports whether p was still running.
func (f *fleet) kill(p *proc, before func()) bool {
	select {
	case <-p.exited:
		return false
	default:
	}
	p.expected.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return false
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		f.t.Errorf("chaos: slot %d gen %d did not die within 30s of SIGKILL", p.slot, p.gen)
	}
	f.kills.Add(1)
	before()
	f.restartIfCurrent(p)
	return true
}

// signal sends sig to p if it still runs.
func (f *fleet) signal(p *proc, sig syscall.Signal) error {
	select {
	case <-p.exited:
		return fmt.Errorf("slot %d gen %d already exited: %v", p.slot, p.gen, p.err)
	default:
	}
	return p.cmd.Process.Signal(sig)
}

// stop ends every process gracefully (SIGTERM; SIGKILL after grace) and
// restarts nothing from now on. It returns the processes that did not exit
// cleanly.
func (f *fleet) stop(grace time.Duration) []string {
	f.mu.Lock()
	f.closing = true
	ps := append([]*proc(nil), f.slots...)
	f.mu.Unlock()
	var bad []string
	for _, p := range ps {
		if p == nil || p.cmd == nil || p.cmd.Process == nil {
			continue
		}
		p.expected.Store(true)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(grace)
	for _, p := range ps {
		if p == nil || p.cmd == nil {
			continue
		}
		select {
		case <-p.exited:
			if p.err != nil && !isKilled(p.err) {
				bad = append(bad, fmt.Sprintf("slot %d gen %d: %v\n%s", p.slot, p.gen, p.err, tail(p.log, 6)))
			}
		case <-deadline:
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
			bad = append(bad, fmt.Sprintf("slot %d gen %d: no exit within %v of SIGTERM\n%s", p.slot, p.gen, grace, tail(p.log, 6)))
		}
	}
	f.wg.Wait()
	return bad
}

// close kills whatever still runs (test cleanup).
func (f *fleet) close() {
	f.mu.Lock()
	f.closing = true
	ps := append([]*proc(nil), f.slots...)
	f.mu.Unlock()
	for _, p := range ps {
		if p == nil || p.cmd == nil || p.cmd.Process == nil {
			continue
		}
		select {
		case <-p.exited:
		default:
			p.expected.Store(true)
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
		}
	}
	f.wg.Wait()
}

// recoveries counts, over the logs of every process so far, the tasks a
// runner re-initialized after a transient broker error and the group
// sessions it lost with a transient cause and rode out (without exiting).
func (f *fleet) recoveries() (restarts, rejoins int) {
	logs, _ := filepath.Glob(filepath.Join(f.dir, "slot*-gen*.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		restarts += bytes.Count(b, []byte(`msg="task failed with a transient error`))
		rejoins += bytes.Count(b, []byte(`msg="lost the consumer group session with a transient error`))
	}
	return restarts, rejoins
}

func (f *fleet) unexpectedExits() []exitInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]exitInfo(nil), f.exits...)
}

// tails returns the last lines of every log in the fleet's directory.
func (f *fleet) tails(lines int) string {
	logs, _ := filepath.Glob(filepath.Join(f.dir, "*.log"))
	var b strings.Builder
	for _, l := range logs {
		fmt.Fprintf(&b, "--- %s\n%s\n", filepath.Base(l), tail(l, lines))
	}
	return b.String()
}

func isKilled(err error) bool {
	ee, ok := err.(*exec.ExitError)
	if !ok {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// tail returns the last n lines of file.
func tail(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	b = bytes.TrimRight(b, "\n")
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
