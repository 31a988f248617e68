//go:build linux

package runtime

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/seccomp"
	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/mountinfo"
	"github.com/hiloop/hiloop/internal/runtime/initproc"
	"github.com/hiloop/hiloop/internal/testenv"
)

// The tests need root and a Debian rootfs with sudo and a user "agent" (uid 1000): the
// "minimal" image, built (once, then cached) into HILOOP_TEST_IMAGES, default
// /var/cache/hiloop-test/images, or any rootfs named by HILOOP_TEST_ROOTFS. Without them they
// skip, except under CI=true, where they fail.
var (
	testRootfs = os.Getenv("HILOOP_TEST_ROOTFS")
	testBase   string // temp dir holding state, run and layer dirs
	testInit   string // the hiloop-init binary built for the tests
	skipReason string
)

// helperEnv makes the test binary act as a short-lived "daemon" that starts a sandbox and
// waits to be killed (see TestDaemonRestart).
const helperEnv = "HILOOP_RUNTIME_TEST_HELPER"

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	MaybeInit()
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(helperMain(spec))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	switch {
	case os.Geteuid() != 0:
		skipReason = "needs root"
	case !seccomp.Enabled:
		skipReason = "built without -tags seccomp"
	case testRootfs == "":
		store := &images.Store{Dir: envOr("HILOOP_TEST_IMAGES", "/var/cache/hiloop-test/images")}
		img, err := store.Build(context.Background(), "minimal", io.Discard)
		if err != nil {
			skipReason = "build the minimal test image: " + err.Error()
		}
		testRootfs = img.Path
	}
	switch {
	case skipReason != "":
	case !fileExists(filepath.Join(testRootfs, "etc/passwd")):
		skipReason = "no test rootfs at " + testRootfs + " (set HILOOP_TEST_ROOTFS)"
	}
	if skipReason == "" {
		base, err := os.MkdirTemp("", "hlrt")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() {
			// A test that failed half-way may leave sandboxes running and overlays mounted;
			// never delete through a mount.
			if r, err := New(testConfig()); err == nil {
				ids, _ := r.List()
				for _, id := range ids {
					_ = r.Stop(context.Background(), id, 0)
				}
			}
			merged, _ := filepath.Glob(filepath.Join(base, "layers", "*", mergedName))
			for _, m := range merged {
				_ = unmountAll(m)
			}
			os.RemoveAll(base)
		}()
		// A sandbox's root, an unprivileged host id, passes these on its way to its rootfs.
		for _, d := range []string{base, filepath.Join(base, "layers")} {
			err := os.MkdirAll(d, 0o711)
			if err == nil {
				err = os.Chmod(d, 0o711)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		testBase = base
		testInit = filepath.Join(base, "hiloop-init")
		cmd := exec.Command("go", "build", "-o", testInit, "github.com/hiloop/hiloop/cmd/hiloop-init")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build hiloop-init: %v\n%s", err, out)
			return 1
		}
	}
	return m.Run()
}

// needRuntime skips (or, under CI, fails) a test that cannot run here.
func needRuntime(t *testing.T) {
	t.Helper()
	if skipReason == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(skipReason)
	}
	t.Skip(skipReason)
}

func testConfig() Config {
	return Config{
		StateDir: filepath.Join(testBase, "state"),
		RunDir:   filepath.Join(testBase, "run"),
		InitPath: testInit,
	}
}

func newRuntime(t *testing.T) *Runtime {
	t.Helper()
	needRuntime(t)
	r, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// testIDBase is the first host id of the test sandboxes' ranges; each testSpec gets its own.
const testIDBase = 1 << 30

var nextRange atomic.Uint32

func testSpec(id string) Spec {
	ws := filepath.Join(testBase, "ws-"+id)
	_ = os.MkdirAll(ws, 0o777)
	_ = os.Chown(ws, 1000, 1000)
	return Spec{
		ID:           id,
		IDBase:       testIDBase + uint32(nextRange.Add(1))*IDRangeSize,
		Hostname:     "box-" + id,
		ImageDir:     testRootfs,
		LayerDir:     filepath.Join(testBase, "layers", id),
		WorkspaceDir: ws,
		CPUs:         1,
		MemoryMB:     256,
	}
}

// startSandbox starts a sandbox that the test stops at its end.
func startSandbox(t *testing.T, r *Runtime, s Spec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Start(ctx, s); err != nil {
		t.Fatalf("start %s: %v", s.ID, err)
	}
	t.Cleanup(func() {
		if err := r.Stop(context.Background(), s.ID, time.Second); err != nil {
			t.Errorf("stop %s: %v", s.ID, err)
		}
	})
}

type result struct {
	stdout, stderr string
	status         ExitStatus
	err            error
}

// run executes p with stdin and collects everything.
func run(t *testing.T, r *Runtime, id string, p ExecSpec, stdin string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	proc, err := r.Exec(ctx, id, p)
	if err != nil {
		t.Fatalf("exec %v: %v", p.Argv, err)
	}
	return collect(t, proc, stdin)
}

func collect(t *testing.T, proc Process, stdin string) result {
	t.Helper()
	var out, errb bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _, _ = io.Copy(&out, proc.Stdout()) }()
	if e := proc.Stderr(); e != nil {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = io.Copy(&errb, e) }()
	}
	go func() {
		_, _ = io.WriteString(proc.Stdin(), stdin)
		proc.Stdin().Close()
	}()
	done := make(chan result, 1)
	go func() {
		st, err := proc.Wait()
		wg.Wait()
		done <- result{out.String(), errb.String(), st, err}
	}()
	select {
	case res := <-done:
		return res
	case <-time.After(30 * time.Second):
		t.Fatal("exec did not finish")
		return result{}
	}
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func TestExec(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("exec")
	startSandbox(t, r, s)

	cases := []struct {
		name       string
		spec       ExecSpec
		stdin      string
		wantOut    string
		wantErr    string // substring of stderr
		wantCode   int
		wantSignal int
		needs      string // a file the image must have, else the case is skipped
	}{
		{name: "user", spec: ExecSpec{Argv: []string{"id", "-un"}, User: "agent"}, wantOut: "agent\n"},
		{name: "root by default", spec: ExecSpec{Argv: []string{"id", "-u"}}, wantOut: "0\n"},
		{name: "numeric user", spec: ExecSpec{Argv: []string{"id", "-un"}, User: "1000"}, wantOut: "agent\n"},
		{name: "stdout and stderr", spec: ExecSpec{Argv: sh("echo out; echo err >&2")}, wantOut: "out\n", wantErr: "err\n"},
		{name: "stdin", spec: ExecSpec{Argv: []string{"cat"}}, stdin: "hello\nworld\n", wantOut: "hello\nworld\n"},
		{name: "exit code", spec: ExecSpec{Argv: sh("exit 7")}, wantCode: 7},
		{name: "signal", spec: ExecSpec{Argv: sh("kill -9 $$")}, wantSignal: 9},
		{name: "not found", spec: ExecSpec{Argv: []string{"nosuchcmd"}}, wantErr: `exec: "nosuchcmd": executable file not found in $PATH`, wantCode: 127},
		{name: "not executable", spec: ExecSpec{Argv: []string{"/etc/passwd"}}, wantErr: "permission denied", wantCode: 126},
		{name: "missing dir", spec: ExecSpec{Argv: []string{"true"}, Dir: "/nope"}, wantErr: `chdir "/nope": no such file or directory`, wantCode: 126},
		{name: "unknown user", spec: ExecSpec{Argv: []string{"true"}, User: "nobody-here"}, wantErr: `unknown user "nobody-here"`, wantCode: 126},
		{name: "home dir", spec: ExecSpec{Argv: []string{"pwd"}, User: "agent"}, wantOut: "/home/agent\n"},
		{name: "dir", spec: ExecSpec{Argv: []string{"pwd"}, Dir: "/workspace"}, wantOut: "/workspace\n"},
		{name: "login env", spec: ExecSpec{Argv: sh(`echo "$HOME $USER $LOGNAME $SHELL $PATH ${TERM:-noterm} $FOO"`), User: "agent", Env: []string{"FOO=bar"}},
			wantOut: "/home/agent agent agent /bin/bash /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin noterm bar\n"},
		{name: "env overrides", spec: ExecSpec{Argv: sh(`echo "$PATH"`), Env: []string{"PATH=/bin"}}, wantOut: "/bin\n"},
		{name: "hostname", spec: ExecSpec{Argv: []string{"hostname"}}, wantOut: "box-exec\n"},
		{name: "etc hostname", spec: ExecSpec{Argv: []string{"cat", "/etc/hostname"}}, wantOut: "box-exec\n"},
		{name: "hosts", spec: ExecSpec{Argv: sh("grep -E '^127' /etc/hosts")}, wantOut: "127.0.0.1\tlocalhost\n127.0.1.1\tbox-exec\n"},
		{name: "only lo", spec: ExecSpec{Argv: []string{"ls", "/sys/class/net"}}, wantOut: "lo\n"},
		{name: "ip link", spec: ExecSpec{Argv: sh("ip -o link | cut -d: -f2")}, wantOut: " lo\n", needs: "usr/bin/ip"},
		{name: "sudo", spec: ExecSpec{Argv: []string{"sudo", "-n", "id", "-u"}, User: "agent"}, wantOut: "0\n"},
		{name: "workspace writable by agent", spec: ExecSpec{Argv: sh("echo hi > /workspace/f && cat /workspace/f"), User: "agent"}, wantOut: "hi\n"},
		{name: "pid 1 is init", spec: ExecSpec{Argv: []string{"cat", "/proc/1/cmdline"}}, wantOut: "/.hiloop/init\x00"},
		{name: "init is read-only", spec: ExecSpec{Argv: sh(`awk '$5 == "/.hiloop/init" { split($6, o, ","); print o[1] }' /proc/self/mountinfo`)}, wantOut: "ro\n"},
		{name: "masked timer_list", spec: ExecSpec{Argv: sh("wc -c < /proc/timer_list")}, wantOut: "0\n"},
		{name: "masked firmware", spec: ExecSpec{Argv: sh("ls /sys/firmware | wc -l")}, wantOut: "0\n"},
		{name: "proc sys read-only", spec: ExecSpec{Argv: sh("echo x > /proc/sys/kernel/hostname")}, wantErr: "Read-only file system", wantCode: 2},
		{name: "no mount", spec: ExecSpec{Argv: []string{"mount", "-t", "tmpfs", "x", "/mnt"}}, wantErr: "permission denied", wantCode: 32},
		{name: "no unshare", spec: ExecSpec{Argv: []string{"unshare", "-U", "true"}}, wantErr: "Operation not permitted", wantCode: 1},
		// Without CAP_SYS_RESOURCE the init can only adjust a child right after its exec: wait.
		{name: "oom score of children", spec: ExecSpec{Argv: sh("sleep 0.1; cat /proc/$$/oom_score_adj /proc/1/oom_score_adj")}, wantOut: wantOOMScores()},
		{name: "cpu limit", spec: ExecSpec{Argv: sh("cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cut -d' ' -f1 /sys/fs/cgroup/cpu.max")}, wantOut: "100000\n"},
		{name: "no swap", spec: ExecSpec{Argv: sh("cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.swap.max")}, wantOut: wantSwap()},
		{name: "pids limit", spec: ExecSpec{Argv: sh("cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max")}, wantOut: fmt.Sprintf("%d\n", PidsPerSandbox)},
		{name: "big env", spec: ExecSpec{Argv: sh(`echo $((${#A} + ${#B} + ${#C}))`), Env: []string{
			"A=" + strings.Repeat("a", 100000), "B=" + strings.Repeat("b", 100000), "C=" + strings.Repeat("c", 100000)}}, wantOut: "300000\n"},
		{name: "no leaked fds", spec: ExecSpec{Argv: []string{"ls", "/proc/self/fd"}}, wantOut: "0\n1\n2\n3\n"},
		{name: "memory limit", spec: ExecSpec{Argv: sh("cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max")}, wantOut: "268435456\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needs != "" && !fileExists(filepath.Join(testRootfs, tc.needs)) {
				t.Fatalf("the test image has no /%s", tc.needs)
			}
			res := run(t, r, s.ID, tc.spec, tc.stdin)
			if res.err != nil {
				t.Fatalf("wait: %v", res.err)
			}
			if tc.wantOut != "" && res.stdout != tc.wantOut {
				t.Errorf("stdout = %q, want %q (stderr %q)", res.stdout, tc.wantOut, res.stderr)
			}
			if tc.wantErr != "" && !strings.Contains(res.stderr, tc.wantErr) {
				t.Errorf("stderr = %q, want it to contain %q", res.stderr, tc.wantErr)
			}
			if tc.wantErr == "" && res.stderr != "" {
				t.Errorf("unexpected stderr %q", res.stderr)
			}
			if res.status.Code != tc.wantCode || res.status.Signal != tc.wantSignal {
				t.Errorf("status = %+v, want code %d signal %d (stderr %q)", res.status, tc.wantCode, tc.wantSignal, res.stderr)
			}
		})
	}
}

// wantOOMScores is what an exec and the init read from their oom_score_adj.
func wantOOMScores() string {
	if canLowerOOMScore() {
		return "0\n-1000\n"
	}
	own := 0
	if b, err := os.ReadFile("/proc/self/oom_score_adj"); err == nil {
		fmt.Sscanf(string(b), "%d", &own)
	}
	return fmt.Sprintf("%d\n%d\n", initproc.ChildOOMScoreAdj(own), own)
}

// wantSwap is the swap limit a sandbox of 256 MiB reads: memory+swap equal to memory on v1,
// no swap on v2.
func wantSwap() string {
	if cgroups.IsCgroup2UnifiedMode() {
		return "0\n"
	}
	return "268435456\n"
}

func TestStartOverRunning(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("again")
	startSandbox(t, r, s)
	first := run(t, r, s.ID, ExecSpec{Argv: sh("touch /etc/first")}, "")
	// A second Start of a running id replaces it (what a daemon does with leftovers).
	if err := r.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	res := run(t, r, s.ID, ExecSpec{Argv: sh("test -e /etc/first; echo $?")}, "")
	if res.stdout != "1\n" || first.err != nil || first.status.Code != 0 {
		t.Errorf("after second start: %+v (first %+v)", res, first)
	}
	if ids, _ := r.List(); !contains(ids, s.ID) {
		t.Errorf("List = %v", ids)
	}
}

func TestExecSignalAndKill(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("kill")
	startSandbox(t, r, s)
	ctx := context.Background()

	t.Run("signal", func(t *testing.T) {
		proc, err := r.Exec(ctx, s.ID, ExecSpec{Argv: []string{"sleep", "1000"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := proc.Signal(int(unix.SIGTERM)); err != nil {
			t.Fatal(err)
		}
		res := collect(t, proc, "")
		if res.err != nil || res.status.Signal != int(unix.SIGTERM) {
			t.Fatalf("status %+v err %v, want signal 15", res.status, res.err)
		}
		if err := proc.Signal(int(unix.SIGTERM)); !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("signal after exit: %v, want ErrProcessDone", err)
		}
	})

	t.Run("kill tree", func(t *testing.T) {
		proc, err := r.Exec(ctx, s.ID, ExecSpec{Argv: []string{"bash", "-c", "sleep 1001 & sleep 1001"}, User: "agent"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return countProcs(t, r, s.ID, "sleep 1001") == 2 })
		start := time.Now()
		if err := proc.Kill(); err != nil {
			t.Fatal(err)
		}
		res := collect(t, proc, "")
		if res.err != nil || res.status.Signal != int(unix.SIGKILL) {
			t.Fatalf("status %+v err %v, want signal 9", res.status, res.err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("kill took %v", d)
		}
		if n := countProcs(t, r, s.ID, "sleep 1001"); n != 0 {
			t.Errorf("%d sleep processes left after Kill", n)
		}
	})

	t.Run("background keeps pipe", func(t *testing.T) {
		// The exec ends when its main process does, even if a child holds stdout open.
		start := time.Now()
		res := run(t, r, s.ID, ExecSpec{Argv: sh("sleep 1000 & echo started")}, "")
		if res.err != nil || res.status.Code != 0 || res.stdout != "started\n" {
			t.Fatalf("got %+v", res)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("exec with a background child took %v", d)
		}
	})

	t.Run("kill as the process exits", func(t *testing.T) {
		// A kill that crosses the exit on the socket must not cost the exit status: the init
		// once closed with the kill unread, and the reset hid the exit message behind it.
		for i := range 100 {
			proc, err := r.Exec(ctx, s.ID, ExecSpec{Argv: sh("exit 3")})
			if err != nil {
				t.Fatal(err)
			}
			go func() { _, _ = io.Copy(io.Discard, proc.Stderr()) }()
			_, _ = io.Copy(io.Discard, proc.Stdout())
			_ = proc.Kill()
			st, err := proc.Wait()
			if err != nil || st.Code != 3 {
				t.Fatalf("run %d: status %+v, err %v; want exit code 3", i, st, err)
			}
		}
	})

	t.Run("daemon disconnect kills session", func(t *testing.T) {
		proc, err := r.Exec(ctx, s.ID, ExecSpec{Argv: sh("sleep 1002 & sleep 1002")})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return countProcs(t, r, s.ID, "sleep 1002") == 2 })
		proc.(*process).conn.Close()
		waitFor(t, func() bool { return countProcs(t, r, s.ID, "sleep 1002") == 0 })
	})
}

// countProcs counts the sandbox's processes whose command line is cmdline.
func countProcs(t *testing.T, r *Runtime, id, cmdline string) int {
	t.Helper()
	script := `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done 2>/dev/null | grep -c -x "$1 "`
	res := run(t, r, id, ExecSpec{Argv: []string{"sh", "-c", script, "sh", cmdline}}, "")
	n := 0
	fmt.Sscanf(res.stdout, "%d", &n)
	return n
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTTY(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("tty")
	startSandbox(t, r, s)

	proc, err := r.Exec(context.Background(), s.ID, ExecSpec{
		Argv: []string{"bash", "-c", `test -t 0 && test -t 1 && test -O "$(tty)" && echo "tty $TERM"; stty size; read x; stty size`},
		User: "agent", TTY: true, Rows: 30, Cols: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	if proc.Stderr() != nil {
		t.Error("a TTY process has a stderr stream")
	}
	out := bufio.NewReader(proc.Stdout())
	readLine := func() string {
		l, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v (got %q)", err, l)
		}
		return strings.TrimRight(l, "\r\n")
	}
	if l := readLine(); l != "tty xterm-256color" {
		t.Errorf("got %q, want a tty with TERM=xterm-256color", l)
	}
	if l := readLine(); l != "30 100" {
		t.Errorf("stty size = %q, want 30 100", l)
	}
	if err := proc.Resize(50, 120); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(proc.Stdin(), "go\n"); err != nil {
		t.Fatal(err)
	}
	if l := readLine(); l != "go" { // the terminal echoes the input
		t.Errorf("echo = %q", l)
	}
	if l := readLine(); l != "50 120" {
		t.Errorf("stty size after resize = %q, want 50 120", l)
	}
	rest, _ := io.ReadAll(out)
	st, err := proc.Wait()
	if err != nil || st.Code != 0 {
		t.Fatalf("wait: %+v %v (rest %q)", st, err, rest)
	}

	res := run(t, r, s.ID, ExecSpec{Argv: []string{"nosuchcmd"}, TTY: true}, "")
	if res.status.Code != 127 || !strings.Contains(res.stdout, "executable file not found") {
		t.Errorf("tty not found: %+v", res)
	}
}

func TestStopDuringExec(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("stopexec")
	startSandbox(t, r, s)

	proc, err := r.Exec(context.Background(), s.ID, ExecSpec{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	go func() { _ = r.Stop(context.Background(), s.ID, 200*time.Millisecond) }()
	res := collect(t, proc, "")
	// sleep dies of the SIGTERM; whether the exit status or the dead init comes first is a race.
	if !errors.Is(res.err, ErrSandboxDied) && res.status.Signal != int(unix.SIGTERM) {
		t.Fatalf("wait: %+v, want ErrSandboxDied or SIGTERM", res)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("wait took %v", d)
	}

	// A process that ignores SIGTERM is only ended by the sandbox going away.
	s2 := testSpec("stopexec2")
	startSandbox(t, r, s2)
	proc, err = r.Exec(context.Background(), s2.ID, ExecSpec{Argv: sh("trap '' TERM; while :; do sleep 0.05; done")})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	start = time.Now()
	go func() { _ = r.Stop(context.Background(), s2.ID, 300*time.Millisecond) }()
	res = collect(t, proc, "")
	if !errors.Is(res.err, ErrSandboxDied) {
		t.Fatalf("wait: %+v, want ErrSandboxDied", res)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("wait took %v", d)
	}
	if _, err := r.Exec(context.Background(), s2.ID, ExecSpec{Argv: []string{"true"}}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("exec after stop: %v, want ErrNotRunning", err)
	}
}

func TestMemoryLimit(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("oom")
	s.MemoryMB = 64
	startSandbox(t, r, s)
	oomKills := func(want string) {
		t.Helper()
		n, err := r.OOMKills(s.ID)
		if err != nil || (want == "none" && n != 0) || (want == "some" && n == 0) {
			t.Errorf("OOMKills = %d, %v; want %s", n, err, want)
		}
	}
	oomKills("none") // and the counter stays open from here

	res := run(t, r, s.ID, ExecSpec{Argv: []string{"bash", "-c", "head -c 300M /dev/zero | tail"}, User: "agent"}, "")
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.status.ExitCode() != 128+9 {
		t.Errorf("memory hog: %+v, want killed (137)", res.status)
	}
	if !r.Running(s.ID) {
		t.Fatal("sandbox not running after an OOM kill")
	}
	if res := run(t, r, s.ID, ExecSpec{Argv: []string{"echo", "alive"}}, ""); res.stdout != "alive\n" {
		t.Errorf("exec after OOM: %+v", res)
	}
	oomKills("some")
	// A restart is a new cgroup, counting from nothing.
	if err := r.Stop(context.Background(), s.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	oomKills("none")
}

// A sandbox's TCP buffers count against it from its start: on cgroup v1 its memory cgroup has a
// TCP limit of a quarter of its memory limit, which also turns the kernel's counting on; v2
// counts them in the memory limit (isolation_pools.txtar fills them).
func TestSocketMemoryCharged(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("tcpmem")
	s.MemoryMB = 64
	startSandbox(t, r, s)
	if err := SocketAccounting(); err != nil {
		testenv.Unavailable(t, "this host does not charge TCP buffers: %v", err)
	}
	dir, err := r.memoryDir(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cgroups.IsCgroup2UnifiedMode() {
		return // nothing to write; memory.stat's sock counts them
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(dir, tcpLimitFile))); got != "16777216" {
		t.Errorf("%s = %s, want 16777216 (a quarter of 64 MiB)", tcpLimitFile, got)
	}
	// A connection's buffers are counted: without the limit written, the kernel counts nothing.
	res := run(t, r, s.ID, ExecSpec{Argv: []string{"python3", "-c", `
import socket
l = socket.create_server(("127.0.0.1", 0)); c = socket.create_connection(l.getsockname()); a, _ = l.accept()
c.setblocking(False)
try:
    while True: c.send(b"x" * 65536)
except BlockingIOError: pass`}}, "")
	if res.err != nil || res.status.ExitCode() != 0 {
		t.Fatalf("fill a connection: %+v", res)
	}
	if got := readFile(t, filepath.Join(dir, "memory.kmem.tcp.max_usage_in_bytes")); strings.TrimSpace(got) == "0" {
		t.Error("memory.kmem.tcp.max_usage_in_bytes = 0: the sandbox's TCP buffers were not counted")
	}
}

func TestSocketAccountingV2(t *testing.T) {
	for _, tc := range []struct {
		cmdline string
		ok      bool
	}{
		{"BOOT_IMAGE=/vmlinuz root=/dev/vda1 ro quiet", true},
		{"root=/dev/vda1 cgroup.memory=nokmem", true},
		{"root=/dev/vda1 cgroup.memory=nosocket", false},
		{"cgroup.memory=nokmem,nosocket quiet", false},
	} {
		if err := socketAccountingV2(tc.cmdline); (err == nil) != tc.ok {
			t.Errorf("%q: %v, want ok %v", tc.cmdline, err, tc.ok)
		}
	}
}

func TestSocketMemoryLimit(t *testing.T) {
	for mb, want := range map[int]int64{0: -1, 64: 16 << 20, 2048: 512 << 20} {
		if got := SocketMemoryLimit(mb); got != want {
			t.Errorf("SocketMemoryLimit(%d) = %d, want %d", mb, got, want)
		}
	}
}

func TestUpperWipedOnStart(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("wipe")
	startSandbox(t, r, s)
	ctx := context.Background()

	if res := run(t, r, s.ID, ExecSpec{Argv: sh("echo x > /etc/marker && echo y > /workspace/keep && cat /etc/marker")}, ""); res.stdout != "x\n" {
		t.Fatalf("write: %+v", res)
	}
	if err := r.Stop(ctx, s.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	res := run(t, r, s.ID, ExecSpec{Argv: sh("test -e /etc/marker; echo $?; cat /workspace/keep")}, "")
	if res.stdout != "1\ny\n" {
		t.Errorf("after restart: %q, want /etc/marker gone and /workspace/keep kept", res.stdout)
	}
}

// A caller may hand the workspace over as a function, to make it beside the runtime's own
// preparation, and give the sandbox its network once its namespaces exist: both are waited for
// before Start returns, and either failing fails the start and leaves nothing running.
func TestStartWithCallersParts(t *testing.T) {
	r := newRuntime(t)
	ctx := context.Background()

	s := testSpec("parts")
	ws := s.WorkspaceDir
	s.WorkspaceDir = ""
	var workspaceCalls, networkCalls atomic.Int32
	s.Workspace = func() (string, error) { workspaceCalls.Add(1); return ws, nil }
	var netNS string
	s.Network = func(context.Context) error {
		networkCalls.Add(1)
		ns, err := r.NetNS(s.ID)
		if err != nil {
			return fmt.Errorf("no network namespace yet: %w", err)
		}
		defer ns.Close()
		netNS, err = os.Readlink(fmt.Sprintf("/proc/self/fd/%d", ns.Fd()))
		return err
	}
	startSandbox(t, r, s)
	if workspaceCalls.Load() != 1 || networkCalls.Load() != 1 {
		t.Fatalf("Workspace called %d times, Network %d; want once each", workspaceCalls.Load(), networkCalls.Load())
	}
	res := run(t, r, s.ID, ExecSpec{Argv: sh("echo made > /workspace/parts && readlink /proc/self/ns/net")}, "")
	if got, err := os.ReadFile(filepath.Join(ws, "parts")); err != nil || string(got) != "made\n" {
		t.Errorf("file written to /workspace: %q, %v; want it in the workspace Workspace gave", got, err)
	}
	if strings.TrimSpace(res.stdout) != netNS {
		t.Errorf("exec runs in network namespace %q, Network was given %q", strings.TrimSpace(res.stdout), netNS)
	}

	for _, tc := range []struct {
		name string
		fail func(*Spec, error)
	}{
		{"workspace", func(s *Spec, err error) { s.Workspace = func() (string, error) { return "", err } }},
		{"network", func(s *Spec, err error) { s.Network = func(context.Context) error { return err } }},
	} {
		s := testSpec("parts-" + tc.name)
		want := errors.New("no " + tc.name)
		tc.fail(&s, want)
		if err := r.Start(ctx, s); !errors.Is(err, want) {
			t.Errorf("%s failing: Start = %v, want %v", tc.name, err, want)
		}
		ids, err := r.List()
		if err != nil {
			t.Fatal(err)
		}
		if r.Running(s.ID) || contains(ids, s.ID) {
			t.Errorf("%s failing: the sandbox was left behind (running %v, listed %v)", tc.name, r.Running(s.ID), contains(ids, s.ID))
		}
	}
}

func TestStopCleansUp(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("clean")
	ctx := context.Background()
	// No collection during the test: it would close a descriptor Stop left behind, unseen.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	deadBefore := deadPidfds(t)
	startSandbox(t, r, s) // its Stop at the end also checks idempotence
	if !r.Running(s.ID) {
		t.Fatal("not running after Start")
	}
	ids, err := r.List()
	if err != nil || !contains(ids, s.ID) {
		t.Fatalf("List = %v, %v", ids, err)
	}
	c, st := loadContainer(t, s.ID)
	// Put a few processes in to see them all go.
	var procs []Process
	for range 3 {
		p, err := r.Exec(ctx, s.ID, ExecSpec{Argv: []string{"bash", "-c", "sleep 1000 & sleep 1000"}})
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	var pids []int
	waitFor(t, func() bool {
		pids, _ = c.Processes()
		return len(pids) == 10 // the init, 3 bash, 6 sleeps
	})
	if err := r.Stop(ctx, s.ID, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		// bash dies of SIGTERM; its exit may or may not have been sent before the init died.
		if st, err := p.Wait(); err != nil && !errors.Is(err, ErrSandboxDied) || err == nil && st.Signal != int(unix.SIGTERM) {
			t.Errorf("exec during stop: %+v %v", st, err)
		}
	}
	for _, pid := range pids {
		if err := unix.Kill(pid, 0); err == nil {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); strings.Contains(string(b), cgroupName(r.cfg.StateDir, s.ID)) {
				t.Errorf("process %d still alive", pid)
			}
		}
	}
	for sub, p := range st.CgroupPaths {
		if fileExists(p) {
			t.Errorf("cgroup %s left at %s", sub, p)
		}
		if !strings.Contains(p, cgroupName(r.cfg.StateDir, s.ID)) {
			t.Errorf("cgroup %s at %s, want it named %s", sub, p, cgroupName(r.cfg.StateDir, s.ID))
		}
	}
	if m, err := mountinfo.Under(filepath.Join(s.LayerDir, mergedName)); err != nil || len(m) > 0 {
		t.Errorf("overlay still mounted: %q, %v", m, err)
	}
	for _, p := range []string{r.socketPath(s.ID), r.rootfsRecord(s.ID), filepath.Join(testConfig().StateDir, s.ID)} {
		if fileExists(p) {
			t.Errorf("%s left behind", p)
		}
	}
	if r.Running(s.ID) {
		t.Error("Running after Stop")
	}
	// Nor does this process keep a descriptor for the init that is gone: the reaper closes its
	// own once it has reaped the init, and the one os/exec opened for libcontainer's record of
	// the start goes with that record, which nothing keeps after the start (a collection).
	waitFor(t, func() bool { goruntime.GC(); return deadPidfds(t) <= deadBefore })
	if _, err := r.Exec(ctx, s.ID, ExecSpec{Argv: []string{"true"}}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("exec after stop: %v, want ErrNotRunning", err)
	}
	if err := r.Stop(ctx, s.ID, time.Second); err != nil {
		t.Errorf("second stop: %v", err)
	}
	ids, _ = r.List()
	if contains(ids, s.ID) {
		t.Errorf("List after Stop = %v", ids)
	}
}

// deadPidfds counts this process's pidfds of processes that have been reaped.
func deadPidfds(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, _ := os.Readlink("/proc/self/fd/" + fd.Name()); target != "anon_inode:[pidfd]" {
			continue
		}
		info, _ := os.ReadFile("/proc/self/fdinfo/" + fd.Name())
		if strings.Contains(string(info), "\nPid:\t-1\n") {
			n++
		}
	}
	return n
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestDaemonRestart starts a sandbox from another process, SIGKILLs that process, and checks
// that a fresh Runtime finds the sandbox, execs in it and stops it.
func TestDaemonRestart(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("restart")
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join([]string{testBase, testInit, s.ID, s.ImageDir, s.LayerDir, strconv.FormatUint(uint64(s.IDBase), 10)}, ","))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper: %q %v", line, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	t.Cleanup(func() { _ = r.Stop(context.Background(), s.ID, time.Second) })

	if !r.Running(s.ID) {
		t.Fatal("sandbox did not survive its daemon")
	}
	res := run(t, r, s.ID, ExecSpec{Argv: []string{"id", "-un"}, User: "agent"}, "")
	if res.stdout != "agent\n" {
		t.Errorf("exec after restart: %+v", res)
	}
	if err := r.Stop(context.Background(), s.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if r.Running(s.ID) {
		t.Error("running after stop")
	}
}

// helperMain is the "daemon" of TestDaemonRestart: start, say ready, wait to be killed.
func helperMain(spec string) int {
	f := strings.Split(spec, ",")
	testBase, testInit = f[0], f[1]
	r, err := New(testConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	base, _ := strconv.ParseUint(f[5], 10, 32)
	s := Spec{ID: f[2], Hostname: f[2], ImageDir: f[3], LayerDir: f[4], IDBase: uint32(base), MemoryMB: 128}
	if err := r.Start(context.Background(), s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	select {}
}

func TestStartStopLatency(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("latency")
	ctx := context.Background()
	var starts, stops []time.Duration
	for range 3 {
		t0 := time.Now()
		if err := r.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
		starts = append(starts, time.Since(t0))
		if res := run(t, r, s.ID, ExecSpec{Argv: []string{"true"}}, ""); res.err != nil {
			t.Fatal(res.err)
		}
		t1 := time.Now()
		const n = 20
		for range n {
			run(t, r, s.ID, ExecSpec{Argv: []string{"true"}, User: "agent"}, "")
		}
		t.Logf("exec true: %v each", time.Since(t1)/n)
		t2 := time.Now()
		if err := r.Stop(ctx, s.ID, time.Second); err != nil {
			t.Fatal(err)
		}
		stops = append(stops, time.Since(t2))
	}
	t.Logf("start: %v, stop: %v", starts, stops)
}

func TestNewValidates(t *testing.T) {
	needRuntime(t)
	good := testConfig()
	for name, cfg := range map[string]Config{
		"relative state": {StateDir: "state", RunDir: good.RunDir, InitPath: good.InitPath},
		"missing init":   {StateDir: good.StateDir, RunDir: good.RunDir, InitPath: "/nonexistent/hiloop-init"},
		"long run dir":   {StateDir: good.StateDir, RunDir: "/" + strings.Repeat("r", 90), InitPath: good.InitPath},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	r, err := New(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), Spec{ID: "Bad_ID", ImageDir: testRootfs, LayerDir: "/tmp/x"}); err == nil {
		t.Error("Start accepted a bad id")
	}
	if _, err := r.Exec(context.Background(), "never-started", ExecSpec{Argv: []string{"true"}}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("exec in unknown sandbox: %v, want ErrNotRunning", err)
	}
	if r.Running("never-started") {
		t.Error("unknown sandbox reported running")
	}
	if err := r.Stop(context.Background(), "never-started", time.Second); err != nil {
		t.Errorf("stop unknown sandbox: %v", err)
	}
}

// A setuid-root program written in a sandbox is setuid there (sudo is one) but not through the
// host's view of the sandbox's root: a host user who reaches the layer dir runs it as himself.
func TestSetuidOnlyInsideTheSandbox(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("suid")
	startSandbox(t, r, s)
	id, err := os.ReadFile("/usr/bin/id") // the host's: it must run on the host too
	if err != nil {
		t.Fatal(err)
	}
	const prog = "/usr/local/bin/suid-id"
	if res := run(t, r, s.ID, ExecSpec{Argv: sh("cat > " + prog + " && chmod 4755 " + prog)}, string(id)); res.status.ExitCode() != 0 {
		t.Fatalf("write %s: %+v", prog, res)
	}
	if res := run(t, r, s.ID, ExecSpec{Argv: []string{prog, "-u"}, User: "agent"}, ""); res.stdout != "0\n" {
		t.Errorf("in the sandbox as agent: euid %q, want 0", res.stdout)
	}
	// As if the data dir had been left open to other users.
	for d := s.LayerDir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(s.LayerDir, mergedName, prog), "-u")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run it through the host's view as nobody: %v", err)
	}
	if string(out) != "65534\n" {
		t.Errorf("through the host's view as nobody: euid %q, want 65534 (nosuid)", out)
	}
}

// TestUserNamespace: root inside is the first id of the sandbox's range outside, the image and
// the files the runtime wrote belong to root inside, and the workspace is idmapped so that its
// ids on disk are those inside.
func TestUserNamespace(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("userns")
	startSandbox(t, r, s)
	base := int(s.IDBase)

	for _, tc := range []struct {
		name, script, user, want string
	}{
		{"uid map", "awk '{print $1, $2, $3}' /proc/self/uid_map /proc/self/gid_map", "", fmt.Sprintf("0 %d 65536\n0 %d 65536\n", base, base)},
		{"image owned by root", "stat -c %u:%g / /etc/passwd /usr/bin", "", "0:0\n0:0\n0:0\n"},
		{"written files owned by root", "stat -c %u:%g /etc/hostname /etc/hosts", "", "0:0\n0:0\n"},
		{"ping groups", "cat /proc/sys/net/ipv4/ping_group_range | tr -s '\\t ' ' '", "", "0 65535\n"},
		{"root chowns", "touch /tmp/f && chown 1000:1000 /tmp/f && stat -c %u /tmp/f", "", "1000\n"},
		{"agent writes workspace", "echo x > /workspace/agent-file && stat -c %u:%g /workspace/agent-file", "agent", "1000:1000\n"},
		{"root writes workspace", "echo x > /workspace/root-file && stat -c %u:%g /workspace/root-file", "", "0:0\n"},
		{"root writes rootfs", "echo x > /root-file && stat -c %u /root-file", "", "0\n"},
		{"host root is nobody", "stat -c %u /.hiloop/init", "", "65534\n"},
		{"open files", "ulimit -Sn", "agent", wantNofile()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, r, s.ID, ExecSpec{Argv: sh(tc.script), User: tc.user}, "")
			if res.err != nil || res.stdout != tc.want || res.status.Code != 0 {
				t.Errorf("%s: stdout %q, stderr %q, status %+v, err %v; want %q", tc.script, res.stdout, res.stderr, res.status, res.err, tc.want)
			}
		})
	}
	// The namespace is owned by the range's first id, to which the kernel charges the per-user
	// limits of everything in the sandbox; owned by host root, every sandbox would share root's.
	_, st := loadContainer(t, s.ID)
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", st.InitProcessPid))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	var owner uint32
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, ns.Fd(), unix.NS_GET_OWNER_UID, uintptr(unsafe.Pointer(&owner))); e != 0 {
		t.Fatalf("NS_GET_OWNER_UID: %v", e)
	}
	if int(owner) != base {
		t.Errorf("the sandbox's user namespace is owned by host uid %d, want %d", owner, base)
	}

	// Seen from the host: the workspace keeps the ids inside, the upper layer has them shifted.
	for p, want := range map[string]int{
		filepath.Join(s.WorkspaceDir, "agent-file"):             1000,
		filepath.Join(s.WorkspaceDir, "root-file"):              0,
		filepath.Join(s.LayerDir, upperName, "root-file"):       base,
		filepath.Join(s.LayerDir, upperName, "etc", "hosts"):    base,
		filepath.Join(s.LayerDir, upperName, "etc", "hostname"): base,
	} {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Errorf("stat %s: %v", p, err)
		} else if int(st.Uid) != want || int(st.Gid) != want {
			t.Errorf("%s is owned by %d:%d on the host, want %d:%d", p, st.Uid, st.Gid, want, want)
		}
	}
}

// loadContainer returns libcontainer's view of the sandbox id and its state.
func loadContainer(t *testing.T, id string) (*libcontainer.Container, *libcontainer.State) {
	t.Helper()
	c, err := libcontainer.Load(testConfig().StateDir, id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.State()
	if err != nil {
		t.Fatal(err)
	}
	return c, st
}

// wantNofile is the soft limit of open files in a sandbox: set by the daemon where it holds
// CAP_SYS_RESOURCE, else by the init, under the hard limit it inherits from us.
func wantNofile() string {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || hasSysResource() {
		return fmt.Sprintf("%d\n", nofileSoft)
	}
	return fmt.Sprintf("%d\n", min(nofileSoft, lim.Max))
}

// A range that would map a sandbox id onto a host account is refused before anything is made.
func TestStartRefusesHostIDs(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("hostids")
	s.IDBase = 1000
	err := r.Start(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "IDBase 1000") {
		t.Fatalf("start with IDBase 1000: %v, want a refusal", err)
	}
	if _, err := os.Stat(s.LayerDir); !os.IsNotExist(err) {
		t.Errorf("layer dir made for a refused start: %v", err)
	}
}
