//go:build linux

package runtime

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"
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
