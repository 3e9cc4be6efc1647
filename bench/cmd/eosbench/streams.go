package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The Kafka Streams rows (d) run bench/streams (Counter.java): the same
// stateful per-key counter with two outputs per input, as a Kafka Streams
// application under exactly_once_v2, one instance with -streams-threads
// stream threads, in a JVM of its own. Its CPU counts as "CPU here".

// buildStreams builds the application in dir with Maven and returns its
// class path.
func buildStreams(ctx context.Context, dir string) (string, error) {
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("kafka streams rows need %s: %w", tool, err)
		}
	}
	cmd := exec.CommandContext(ctx, "mvn", "-q", "-f", filepath.Join(dir, "pom.xml"), "package", "dependency:copy-dependencies",
		"-DincludeScope=runtime", "-DoutputDirectory=target/lib")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", dir, err, out)
	}
	return filepath.Join(dir, "target", "classes") + string(os.PathListSeparator) + filepath.Join(dir, "target", "lib", "*"), nil
}

// streamsProc is the Kafka Streams counter at commit.interval.ms interval.
func streamsProc(label, classPath string, interval time.Duration, threads int) processor {
	return processor{label: label, run: func(ctx context.Context, j job) error {
		dir, err := os.MkdirTemp("", "eosbench-streams-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cmd := exec.Command("java", "-cp", classPath, "-Dorg.slf4j.simpleLogger.defaultLogLevel=error",
			"flechtwerk.bench.Counter", strings.Join(j.env.brokers, ","), j.group, j.in, j.out, dir,
			strconv.FormatInt(interval.Milliseconds(), 10), strconv.Itoa(threads))
		cmd.Stderr = os.Stderr
		// An eosbench that exits on an error leaves no JVM behind.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting kafka streams: %w", err)
		}
		j.env.child.Store(int64(cmd.Process.Pid))
		defer j.env.child.Store(0)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if sc.Text() == "first" {
					j.started()
				}
			}
		}()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			return fmt.Errorf("kafka streams exited before the row ended: %v", err)
		case <-ctx.Done():
		}
		// A graceful close, as a deployment would stop it.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			var ee *exec.ExitError
			if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 143) {
				return fmt.Errorf("kafka streams: %w", err)
			}
			return nil
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("kafka streams did not stop within 1m of SIGTERM")
		}
	}}
}
