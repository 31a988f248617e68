//go:build linux

package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/testenv"
)

func probe(r *Runtime, id string) Liveness {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	return r.Probe(ctx, id)
}

// initPid is the host's pid of the sandbox's init.
func initPid(t *testing.T, r *Runtime, id string) int {
	t.Helper()
	c, err := libcontainer.Load(r.cfg.StateDir, id)
	if err == nil {
		var st *libcontainer.State
		if st, err = c.State(); err == nil {
			return st.InitProcessPid
		}
	}
	t.Fatal(err)
	return 0
}

// A stopped init is unresponsive, not gone: it still runs, and answers once continued.
func TestProbe(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("probe")
	startSandbox(t, r, s)
	if got := probe(r, s.ID); got != Answering {
		t.Fatalf("probe of a running sandbox = %v, want Answering", got)
	}
	init := initPid(t, r, s.ID)
	if err := unix.Kill(init, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The kernel stops the init asynchronously: a ping sent before the stop lands is answered
	// (CI saw it). Glance reads the stop from /proc without pinging.
	for deadline := testenv.Deadline(t); r.Glance(s.ID) != Unresponsive; {
		select {
		case <-deadline:
			t.Fatal("a stopped init never looked stopped")
		case <-time.After(5 * time.Millisecond):
		}
	}
	got := probe(r, s.ID)
	if err := unix.Kill(init, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if got != Unresponsive {
		t.Errorf("probe of a stopped init = %v, want Unresponsive", got)
	}
	if got := probe(r, s.ID); got != Answering {
		t.Errorf("probe once continued = %v, want Answering", got)
	}
	if got := probe(r, "nosuch"); got != Gone {
		t.Errorf("probe of no sandbox = %v, want Gone", got)
	}
}

// Every sandbox gets its own devpts instance with its share of ptys (TestExec checks its pids).
func TestPtysShare(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("shares")
	startSandbox(t, r, s)
	res := run(t, r, s.ID, ExecSpec{Argv: sh("grep ' /dev/pts ' /proc/self/mounts")}, "")
	if want := fmt.Sprintf(",max=%d", PtysPerSandbox); !strings.Contains(res.stdout, want) {
		t.Errorf("devpts mount %q lacks %s", res.stdout, want)
	}
}

// Glance tells a running, a stopped and a dead init apart without pinging, in this runtime and
// in another on the same directories (a restarted daemon, which did not start the init), and
// keeps a timed-out Probe's finding until a Probe answers.
func TestGlance(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("glance")
	startSandbox(t, r, s)
	restarted, err := New(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	look := func(want Liveness, why string) {
		t.Helper()
		for _, rt := range []*Runtime{r, restarted} {
			if got := rt.Glance(s.ID); got != want {
				t.Errorf("glance at %s = %v, want %v", why, got, want)
			}
		}
	}
	look(Answering, "a running init")
	init := initPid(t, r, s.ID)
	// The restarted runtime found the init from libcontainer's state file, reading two of its
	// fields: they are where this runc writes them (else it decoded the whole file).
	b, err := os.ReadFile(filepath.Join(r.cfg.StateDir, s.ID, stateFile))
	if pid, _, ok := initFields(b); err != nil || !ok || pid != init {
		t.Errorf("libcontainer's state file gives init %d (%v, %v), want %d", pid, ok, err, init)
	}
	if err := unix.Kill(init, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The kernel stops the init asynchronously.
	for deadline := testenv.Deadline(t); r.Glance(s.ID) != Unresponsive; {
		select {
		case <-deadline:
			t.Fatal("a stopped init never looked unresponsive")
		case <-time.After(5 * time.Millisecond):
		}
	}
	look(Unresponsive, "a stopped init")
	if got := probe(r, s.ID); got != Unresponsive {
		t.Fatalf("probe of a stopped init = %v", got)
	}
	if err := unix.Kill(init, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if got := r.Glance(s.ID); got != Unresponsive {
		t.Errorf("glance after a probe timed out = %v, want Unresponsive until a probe answers", got)
	}
	if got := probe(r, s.ID); got != Answering {
		t.Fatalf("probe once continued = %v", got)
	}
	look(Answering, "an init that answered again")

	if err := unix.Kill(init, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := testenv.Deadline(t); restarted.Glance(s.ID) != Gone || r.Glance(s.ID) != Gone; {
		select {
		case <-deadline:
			t.Fatalf("a killed init still looks %v (%v to the restarted runtime)", r.Glance(s.ID), restarted.Glance(s.ID))
		case <-time.After(5 * time.Millisecond):
		}
	}
	if got := r.Glance("nosuch"); got != Gone {
		t.Errorf("glance at no sandbox = %v, want Gone", got)
	}
}

// A signal arriving while exited polls the pidfd (Go's preemption signal, SIGURG, at any
// time) makes the poll fail with EINTR; that is no answer, and a live init is not gone.
func TestExitedIgnoresInterruptedPolls(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	w, err := openWatch(cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.pidfd.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = unix.Kill(unix.Getpid(), unix.SIGURG)
			}
		}
	}()
	for i := range 20000 {
		if w.exited() {
			t.Fatalf("a live process looked exited at poll %d", i)
		}
	}
}
