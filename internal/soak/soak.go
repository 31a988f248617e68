// Package soak is hiloop's crash soak and connection flood: it drives a real sandboxd (started
// on a private data dir and socket) with a mixed workload from concurrent clients through
// pkg/client, kills the daemon with SIGKILL at random instants and at instants aimed into single
// operations, restarts it, and checks the daemon against a model of what was acknowledged. It
// owns nothing of the daemon's: it reads the data dir, /proc and /sys only to check them.
package soak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// Config is one soak run.
type Config struct {
	// Daemon is the sandboxd to soak; Run starts it and leaves it stopped.
	Daemon *Daemon
	// Image is the image every sandbox starts from (built in Daemon.ImagesDir).
	Image string
	// Kills ends the run after this many kills of the daemon.
	Kills int
	// Duration, if not 0, ends the run after this long even if fewer kills were made.
	Duration time.Duration
	// Concurrency is how many clients run operations at once.
	Concurrency int
	// Seed chooses the operations, their targets and the kills' schedule.
	Seed uint64
	// Aimed is the share of kills aimed 0-200 ms after a single operation was sent, e.g. 0.75;
	// the others fall at random instants.
	Aimed float64
	// Logf prints progress: operations, kills and violations.
	Logf func(format string, args ...any)
	// Trace also prints every call with its outcome, to follow a violation back to its cause.
	Trace bool
}

// Report is what a run did and found.
type Report struct {
	Seed uint64
	// Operations counts the calls sent, by kind (retries included).
	Operations map[string]int
	// Kills is how many times the daemon was killed, Aimed how many of them were aimed.
	Kills, Aimed int
	// Interrupted counts operations a kill left without an answer; Retried those retried with
	// their idempotency key; Replays the acknowledged calls repeated to check their receipt.
	Interrupted, Retried, Replays int
	// Violations are the checks that failed.
	Violations []Violation
	Duration   time.Duration
}

// Total is the number of operations sent.
func (r Report) Total() int {
	n := 0
	for _, c := range r.Operations {
		n += c
	}
	return n
}

// Violation is one failed check: after which kill, what was checked, and what was found.
type Violation struct {
	Kill   int
	Check  string
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("after kill %d: %s: %s", v.Kill, v.Check, v.Detail)
}

// soak is a run in progress.
type soak struct {
	cfg Config
	c   *client.Client

	// gate lets operations run (read side) or holds them while the daemon is restarted and
	// checked (write side).
	gate sync.RWMutex

	mu     sync.Mutex
	report Report
	kill   int // kills so far

	// armed is set while the next operation to start should be the target of an aimed kill; the
	// operation that takes it sends its description on aim.
	armed atomic.Bool
	aim   chan string

	workers []*worker
}

// Run runs a soak: it starts the daemon, runs the workload until cfg.Kills kills (or
// cfg.Duration), checks after every restart, then deletes everything, stops the daemon and
// checks that nothing is left. An error is a failure to run at all; what the checks find is in
// Report.Violations.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 1
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	s := &soak{cfg: cfg, aim: make(chan string, 1)}
	s.report = Report{Seed: cfg.Seed, Operations: map[string]int{}}
	start := time.Now()
	c, err := client.New(cfg.Daemon.Host(), "")
	if err != nil {
		return s.report, err
	}
	s.c = c
	if err := cfg.Daemon.Start(ctx); err != nil {
		return s.report, err
	}
	defer cfg.Daemon.Kill() // only if something below returned early
	cfg.Logf("soak: seed %d, %d clients, %d kills (%.0f%% aimed), daemon log %s", cfg.Seed, cfg.Concurrency, cfg.Kills, cfg.Aimed*100, cfg.Daemon.LogPath())

	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range cfg.Concurrency {
		w := newWorker(s, i)
		s.workers = append(s.workers, w)
		wg.Add(1)
		go func() { defer wg.Done(); w.run(wctx) }()
	}
	err = s.killLoop(ctx, start)
	stopWorkers()
	wg.Wait()
	if err != nil {
		return s.report, err
	}
	// What the last restart left unresolved is resolved before the final checks.
	for _, w := range s.workers {
		w.settle(ctx)
	}
	s.check(ctx)
	s.finish(ctx)
	s.report.Duration = time.Since(start)
	return s.report, nil
}

// killLoop kills and restarts the daemon until the run's end, checking after each restart.
func (s *soak) killLoop(ctx context.Context, start time.Time) error {
	rng := rand.New(rand.NewPCG(s.cfg.Seed, 0x6b696c6c))
	for s.kill < s.cfg.Kills {
		if s.cfg.Duration > 0 && time.Since(start) > s.cfg.Duration {
			break
		}
		gap := 300*time.Millisecond + time.Duration(rng.Int64N(int64(2200*time.Millisecond)))
		aimed := rng.Float64() < s.cfg.Aimed
		delay := time.Duration(rng.Int64N(int64(200 * time.Millisecond)))
		if err := sleep(ctx, gap); err != nil {
			return err
		}
		what := "at a random instant"
		if aimed {
			s.armed.Store(true)
			select {
			case op := <-s.aim:
				if err := sleep(ctx, delay); err != nil {
					return err
				}
				what = fmt.Sprintf("%s after sending %s", delay.Round(time.Millisecond), op)
				s.mu.Lock()
				s.report.Aimed++
				s.mu.Unlock()
			case <-time.After(10 * time.Second):
				// No operation started (all clients busy in long ones): kill anyway.
				s.armed.Store(false)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		s.cfg.Daemon.Kill()
		// Hold new operations; the ones in flight fail now that the daemon is gone.
		s.gate.Lock()
		s.armed.Store(false)
		select {
		case <-s.aim: // an operation took the aim after the timeout
		default:
		}
		s.mu.Lock()
		s.kill++
		s.report.Kills = s.kill
		n := s.kill
		s.mu.Unlock()
		t0 := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := s.cfg.Daemon.Start(rctx)
		cancel()
		if err != nil {
			s.gate.Unlock()
			return fmt.Errorf("restart after kill %d: %w", n, err)
		}
		restart := time.Since(t0)
		before := len(s.violations())
		s.check(ctx)
		s.cfg.Logf("kill %d %s (%.1fs in): back in %s, %d operations so far, %d new violations",
			n, what, time.Since(start).Seconds(), restart.Round(time.Millisecond), s.total(), len(s.violations())-before)
		s.gate.Unlock()
	}
	return nil
}

// started is called as an operation is about to be sent: it takes an armed aim.
func (s *soak) started(desc string) {
	if s.armed.CompareAndSwap(true, false) {
		s.aim <- desc
	}
}

func (s *soak) count(kind string) {
	s.mu.Lock()
	s.report.Operations[kind]++
	s.mu.Unlock()
}

func (s *soak) add(field *int) {
	s.mu.Lock()
	*field++
	s.mu.Unlock()
}

func (s *soak) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.report.Total()
}

func (s *soak) violations() []Violation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.report.Violations)
}

// violate records a failed check and prints it at once.
func (s *soak) violate(check, format string, args ...any) {
	s.mu.Lock()
	v := Violation{Kill: s.kill, Check: check, Detail: fmt.Sprintf(format, args...)}
	s.report.Violations = append(s.report.Violations, v)
	s.mu.Unlock()
	s.cfg.Logf("VIOLATION %s", v)
}

// receiptGap says whether a retried call's refusal err, with code, means that its first try was
// done and its receipt lost (getErr is the error of looking its effect up): a retry with the key
// must find the call done. It records the violation, and the caller files the effect.
func (s *soak) receiptGap(o *op, err error, code api.ErrorCode, getErr error) bool {
	if o.attempts == 0 || !isCode(err, code) || getErr != nil {
		return false
	}
	s.violate("receipt gap", "%s (key %s) was done, and its retry answered: %v", o.desc, o.key, err)
	return true
}

// definite says err is the daemon's answer (a client error), not a lost answer: the request
// will not do anything if repeated with another key.
func definite(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code.HTTPStatus() < 500
}

// isCode says err is the daemon's error with that code.
func isCode(err error, code api.ErrorCode) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code == code
}

// markers lists the marker files in a running sandbox's /workspace/m.
func (s *soak) markers(ctx context.Context, name string) (map[string]bool, error) {
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := s.c.Exec(ctx, name, api.ExecRequest{Command: []string{"sh", "-c", "mkdir -p /workspace/m && ls -1 /workspace/m"}},
		client.ExecIO{Stdout: &out, Stderr: &errOut})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("ls /workspace/m exited %d: %s", res.ExitCode, strings.TrimSpace(errOut.String()))
	}
	found := map[string]bool{}
	for _, l := range strings.Fields(out.String()) {
		found[l] = true
	}
	return found, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sortedKeys lists a set's members in order, for messages.
func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
