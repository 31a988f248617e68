// Package e2e runs the end-to-end scripts in testdata/script against the real hiloop and
// sandboxd, running real sandboxes. They need root; under CI=true a missing prerequisite fails.
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/opencontainers/cgroups"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/cli"
	"github.com/hiloop/hiloop/internal/daemon"
	"github.com/hiloop/hiloop/internal/hostleaks"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// testImage is the image every script's sandboxes start from.
const testImage = "minimal"

func TestMain(m *testing.M) {
	commands := map[string]func(){
		"hiloop":     func() { os.Exit(cli.Main()) },
		"hiloop-ssh": func() { os.Exit(cli.SSHShimMain()) },
		"sandboxd":   func() { os.Exit(daemon.Main()) },
	}
	if _, command := commands[filepath.Base(os.Args[0])]; !command {
		runScriptsAtOnce()
	}
	testscript.Main(m, commands)
}

// scriptsPerCPU is how many scripts run at once per CPU unless -test.parallel says otherwise. A
// script spends much of its time waiting (on sandboxes' starts, the disk, the commands it runs)
// rather than on a CPU of its own: on 2 cores, 4 at once took the package from 868 s to 646 s.
const scriptsPerCPU = 2

// runScriptsAtOnce sets -test.parallel to scriptsPerCPU per CPU, unless the command line set it.
func runScriptsAtOnce() {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(scriptsPerCPU*goruntime.GOMAXPROCS(0)))
	}
}

var (
	prepOnce  sync.Once
	initPath  string
	imagesDir string
	prepErr   error
)

// prepare builds hiloop-init, hiloop-fake-agent (next to it, where sandboxd finds it), the
// isolation suite's syscall probe and the test image once (the image is cached across runs).
func prepare(t *testing.T) {
	prepOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hiloop-e2e-bin")
		if err != nil {
			prepErr = err
			return
		}
		initPath = filepath.Join(dir, "hiloop-init")
		for _, b := range []struct{ out, pkg, goarch string }{
			{"hiloop-init", "cmd/hiloop-init", ""},
			{"hiloop-fake-agent", "cmd/hiloop-fake-agent", ""},
			// isolation_syscalls.txtar copies it into a sandbox; the i386 build must not run there.
			{"syscallprobe", "internal/e2e/syscallprobe", ""},
			{"syscallprobe-386", "internal/e2e/syscallprobe", "386"},
		} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), "github.com/hiloop/hiloop/"+b.pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if b.goarch != "" {
				cmd.Env = append(cmd.Env, "GOARCH="+b.goarch)
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				prepErr = fmt.Errorf("build %s: %v\n%s", b.out, err, out)
				return
			}
		}
		imagesDir = os.Getenv("HILOOP_TEST_IMAGES")
		if imagesDir == "" {
			imagesDir = "/var/cache/hiloop-test/images"
		}
		store := &images.Store{Dir: imagesDir}
		start := time.Now()
		if _, err := store.Build(context.Background(), testImage, &testLogWriter{t: t}); err != nil {
			prepErr = fmt.Errorf("build test image %q: %v", testImage, err)
			return
		}
		t.Logf("test image ready in %s", time.Since(start).Round(time.Millisecond))
	})
	if prepErr != nil {
		t.Fatal(prepErr)
	}
}

type testLogWriter struct{ t *testing.T }

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestScripts(t *testing.T) {
	testenv.RequireRoot(t)
	prepare(t)
	go func() {
		if deadline := testenv.Deadline(t); deadline != nil {
			<-deadline
			close(scriptsExpired)
		}
	}()
	testscript.Run(t, scriptParams(filepath.Join("..", "..", "testdata", "script")))
}

// TestTerminalScripts runs the scripts that drive full-screen programs in a real terminal
// (tmux), after TestScripts and on their own: under the CPU of the whole suite at once, a
// terminal program was seen to take longer to end after a quit than a script can wait.
func TestTerminalScripts(t *testing.T) {
	testenv.RequireRoot(t)
	prepare(t)
	testscript.Run(t, scriptParams(filepath.Join("..", "..", "testdata", "terminal")))
}

// remoteScripts run once more through a remote (TestRemoteScripts): the CLI reaches the daemon
// as a laptop does, over TLS with the server's fingerprint pinned and a client certificate of
// the admin's, so that nothing is handed off and every stream (exec, exec -it, port streams,
// session streams, SSH through the advertised endpoint, an image archive's upload) crosses the
// network path.
var remoteScripts = map[string][]string{
	"script":   {"lifecycle", "exec", "ssh", "session_turns", "session_stream", "session_permissions", "snapshot", "images_shape"},
	"terminal": {"chat"},
}

// remoteEnv is set in the scripts TestRemoteScripts runs: `daemon start` then also serves
// --listen and points the CLI at it through a remote (setupRemote).
const remoteEnv = "E2E_REMOTE"

func TestRemoteScripts(t *testing.T) {
	testenv.RequireRoot(t)
	prepare(t)
	for _, dir := range []string{"script", "terminal"} {
		p := scriptParams(filepath.Join("..", "..", "testdata", dir))
		for _, name := range remoteScripts[dir] {
			p.Files = append(p.Files, filepath.Join(p.Dir, name+".txtar"))
		}
		p.Dir = ""
		setup := p.Setup
		p.Setup = func(env *testscript.Env) error {
			if err := setup(env); err != nil {
				return err
			}
			env.Setenv(remoteEnv, "1")
			return nil
		}
		t.Run(dir, func(t *testing.T) { testscript.Run(t, p) })
	}
}

// withRemoteListen adds --listen on the script's remote port to a daemon's flags, in a script
// TestRemoteScripts runs, unless the script gives its own.
func withRemoteListen(ts *testscript.TestScript, args []string) []string {
	if ts.Getenv(remoteEnv) != "1" || slices.Contains(args, "--listen") {
		return args
	}
	port := ts.Getenv("E2E_REMOTE_PORT")
	if port == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		ts.Check(err)
		port = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
		ts.Setenv("E2E_REMOTE_PORT", port)
	}
	return append(slices.Clone(args), "--listen", "127.0.0.1:"+port)
}

// setupRemote, once the daemon of a script TestRemoteScripts runs is up, adds the remote "e2e"
// to the script's CLI as a user on a laptop would (`hiloop remote add` with a trust token of the
// admin's and the fingerprint the host shows) and makes it the CLI's daemon (HILOOP_REMOTE).
func setupRemote(ts *testscript.TestScript, d *scriptDaemon) {
	if ts.Getenv(remoteEnv) != "1" || ts.Getenv("HILOOP_REMOTE") != "" {
		return
	}
	c, err := client.New("unix://"+d.socket, "")
	ts.Check(err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := c.Version(ctx)
	ts.Check(err)
	created, err := c.NewTrustToken(ctx, "admin", "")
	ts.Check(err)
	bin, err := lookPath("hiloop", ts.Getenv("PATH"))
	ts.Check(err)
	cmd := exec.CommandContext(ctx, bin, "remote", "add", "e2e", "https://127.0.0.1:"+ts.Getenv("E2E_REMOTE_PORT"),
		"--token", created.TrustToken, "--accept-fingerprint", v.TLSFingerprint)
	cmd.Env = scriptEnv(ts)
	out, err := cmd.CombinedOutput()
	if err != nil {
		ts.Fatalf("remote add: %v\n%s", err, out)
	}
	ts.Setenv("HILOOP_REMOTE", "e2e")
	// The script's CLI now reaches the daemon through the remote, not the socket.
	who := exec.CommandContext(ctx, bin, "whoami", "-o", "json")
	who.Env = scriptEnv(ts)
	if out, err := who.CombinedOutput(); err != nil || !strings.Contains(string(out), `"via": "certificate"`) {
		ts.Fatalf("whoami through the remote: %v\n%s", err, out)
	}
}

// scriptCondition answers a script's [ia32]: whether this host's kernel runs 32-bit x86
// programs at all (some are built without IA32 emulation, or boot with it off); and [cgroup2]:
// whether the host's cgroups are v2's unified hierarchy.
func scriptCondition(cond string) (bool, error) {
	switch cond {
	case "ia32":
		err := exec.Command(filepath.Join(filepath.Dir(initPath), "syscallprobe-386"), "none").Run()
		return !errors.Is(err, syscall.ENOEXEC), nil
	case "cgroup2":
		return cgroups.IsCgroup2UnifiedMode(), nil
	}
	return false, fmt.Errorf("unknown condition %q", cond)
}

// scriptParams are the parameters every script directory runs with: the commands of this file.
func scriptParams(dir string) testscript.Params {
	return testscript.Params{
		Dir:                 dir,
		RequireExplicitExec: true,
		Setup:               setupScript,
		Condition:           scriptCondition,
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"daemon":      cmdDaemon,
			"leakcheck":   cmdLeakcheck,
			"waitfor":     cmdWaitfor,
			"exits":       cmdExits,
			"killinit":    cmdKillInit,
			"signalinit":  cmdSignalInit,
			"sandboxpids": cmdSandboxPids,
			"waitcgroup":  cmdWaitCgroup,
			"streamcheck": cmdStreamCheck,
			"execwindow":  cmdExecWindow,
			"exechandoff": cmdExecHandoff,
			"capture":     cmdCapture,
			"waitsession": cmdWaitSession,
			"freeport":    cmdFreeport,
			"testserver":  cmdTestServer,
			"resigner":    cmdResigner,
			"gitserver":   cmdGitServer,
			"tcpsend":     cmdTCPSend,
			"acpinit":     cmdACPInit,
			"opengate":    cmdOpenGate,
			"daemonfds":   cmdDaemonFDs,
			"tmux":        cmdTmux,
			"shapeimages": cmdShapeImages,
			"ociimage":    cmdOCIImage,
			"registry":    cmdRegistry,

			"fakeprovider":          cmdFakeProvider,
			"fakeprovider-requests": cmdFakeProviderRequests,
			"meteringcheck":         cmdMeteringCheck,
			"oldeventlog":           cmdOldEventLog,
		},
	}
}

// scriptDaemon is the sandboxd one script runs.
type scriptDaemon struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd has exited and been waited for
	dataDir string
	socket  string
	logPath string
	args    []string
}

const daemonKey = "daemon"

func setupScript(env *testscript.Env) error {
	// Unix socket paths are short: keep the daemon's files under a short directory.
	dir, err := os.MkdirTemp("/tmp", "hl")
	if err != nil {
		return err
	}
	// Sandboxes' roots, unprivileged host ids, pass through it to their root filesystems.
	if err := os.Chmod(dir, 0o711); err != nil {
		return err
	}
	d := &scriptDaemon{
		dataDir: filepath.Join(dir, "d"),
		socket:  filepath.Join(dir, "s.sock"),
		logPath: filepath.Join(env.WorkDir, "sandboxd.log"),
	}
	env.Values[daemonKey] = d
	env.Values[gatesKey] = &gates{}
	env.Values[tmuxKey] = &scriptTmux{}
	env.Setenv("HILOOP_HOST", "unix://"+d.socket)
	env.Setenv("DATADIR", d.dataDir)
	env.Setenv("SOCKET", d.socket)
	env.Setenv("IMAGE", testImage)
	env.Setenv("INIT_PATH", initPath)
	env.Setenv("PROBE", filepath.Join(filepath.Dir(initPath), "syscallprobe"))
	env.Setenv("PROBE386", filepath.Join(filepath.Dir(initPath), "syscallprobe-386"))
	// The CLI keeps its SSH key and known_hosts per script; ssh wants a home.
	env.Setenv("HOME", env.WorkDir)
	env.Setenv("HILOOP_CONFIG_DIR", filepath.Join(env.WorkDir, ".hiloop"))
	env.Setenv("IMAGES_DIR", imagesDir)
	env.Defer(func() {
		// A failed script shows the end of its daemon's log, which the work directory it is
		// in does not outlive.
		if f, ok := env.T().(interface{ Failed() bool }); ok && f.Failed() {
			env.T().Log("the end of sandboxd's log:\n" + logTail(d.logPath, 60))
		}
		// Leave nothing behind: delete every user's sandboxes through the real daemon, as
		// the admin acting as their owner, then stop it.
		if d.cmd == nil {
			d.start(env.Getenv("PATH"), nil)
		}
		if c, err := client.New("unix://"+d.socket, ""); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if list, err := c.ListSandboxes(ctx, client.AllUsers()); err == nil {
				for _, sb := range list {
					c.SetAs(sb.Owner)
					if err := c.DeleteSandbox(ctx, sb.Name, true); err != nil {
						env.T().Log("cleanup: delete", sb.Owner, sb.Name, ":", err)
					}
				}
			}
			if list, err := c.ListSnapshots(ctx, "", client.AllUsers()); err == nil {
				for _, sn := range list {
					c.SetAs(sn.Owner)
					if err := c.DeleteSnapshot(ctx, sn.Name); err != nil {
						env.T().Log("cleanup: delete snapshot", sn.Owner, sn.Name, ":", err)
					}
				}
			}
			cancel()
		}
		d.stop(syscall.SIGTERM)
		leaks := hostleaks.Find(d.dataDir)
		// A killed sandbox's last processes may still be on their way out (zombies until reaped).
		for deadline := time.Now().Add(5 * time.Second); len(leaks) > 0 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			leaks = hostleaks.Find(d.dataDir)
		}
		// A script may mount a small filesystem on the data dir; a failed one leaves it.
		_ = syscall.Unmount(d.dataDir, 0)
		if len(leaks) > 0 {
			env.T().Fatal("left behind after the script:\n" + strings.Join(leaks, "\n"))
		}
		os.RemoveAll(dir)
	})
	return nil
}

// logTail returns the last n lines of the file at path.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

func (d *scriptDaemon) start(path string, extra []string) error {
	// --overcommit 100: the scripts make many sandboxes, each promising 20 GiB by default, on
	// machines shared with other work; storage_budget.txtar, which tests the budget, gives its
	// own (the last flag wins).
	args := append([]string{
		"--data-dir", d.dataDir, "--socket", d.socket, "--init-path", initPath, "--images-dir", imagesDir,
		"--overcommit", "100",
	}, extra...)
	d.args = extra
	log, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	bin, err := lookPath("sandboxd", path)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "PATH="+path)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	d.cmd, d.exited = cmd, exited
	c, err := client.New("unix://"+d.socket, "")
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Version(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			// A daemon that refused its flags is not running: the script may start another.
			d.cmd = nil
			return fmt.Errorf("sandboxd exited: %v (log: %s)", cmd.ProcessState, d.logPath)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandboxd did not come up: %v (log: %s)", err, d.logPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *scriptDaemon) stop(sig syscall.Signal) {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(sig)
	<-d.exited
	d.cmd = nil
}

func lookPath(name, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not in PATH", name)
}

// cmdDaemon: daemon start [sandboxd flags...] | stop | kill | restart [flags...] | log. Start and
// restart set $DAEMON_PID, for scripts that look at the daemon in /proc.
func cmdDaemon(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 0 {
		ts.Fatalf("usage: daemon start|stop|kill|restart|log")
	}
	d := ts.Value(daemonKey).(*scriptDaemon)
	switch args[0] {
	case "start":
		if d.cmd != nil {
			ts.Fatalf("daemon already running")
		}
		err := d.start(ts.Getenv("PATH"), withRemoteListen(ts, args[1:]))
		if neg {
			if err == nil {
				ts.Fatalf("daemon started unexpectedly")
			}
			return
		}
		ts.Check(err)
		ts.Setenv("DAEMON_PID", strconv.Itoa(d.cmd.Process.Pid))
		setupRemote(ts, d)
	case "stop":
		d.stop(syscall.SIGTERM)
	case "kill":
		d.stop(syscall.SIGKILL)
	case "restart":
		extra := d.args
		if len(args) > 1 {
			extra = args[1:]
		}
		d.stop(syscall.SIGTERM)
		ts.Check(d.start(ts.Getenv("PATH"), withRemoteListen(ts, extra)))
		ts.Setenv("DAEMON_PID", strconv.Itoa(d.cmd.Process.Pid))
	case "log":
		b, _ := os.ReadFile(d.logPath)
		_, _ = ts.Stdout().Write(b) // for stdout and stderr assertions; shown on failure

	default:
		ts.Fatalf("unknown daemon verb %q", args[0])
	}
}

// cmdDaemonFDs: daemonfds save FILE writes what the script's sandboxd holds open to FILE, one
// descriptor a line (the target of /proc/PID/fd/N: a path, socket:[INODE], pipe:[INODE],
// anon_inode:[KIND]), sorted. daemonfds within FILE waits up to 30 s until every descriptor the
// daemon holds is one of FILE's (as many times as FILE has it), and fails naming the others:
// whatever a stopped sandbox left behind (a gateway listener, an upstream connection, a pidfd, a
// file) is a new socket or an extra open, never in FILE. Descriptors FILE has and the daemon has
// closed since are no leak: a client's connection to the API may still be open when FILE is saved.
func cmdDaemonFDs(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 || args[0] != "save" && args[0] != "within" {
		ts.Fatalf("usage: daemonfds save|within FILE")
	}
	d := ts.Value(daemonKey).(*scriptDaemon)
	if d.cmd == nil {
		ts.Fatalf("daemonfds: the daemon is not running")
	}
	fdDir := fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid)
	if args[0] == "save" {
		fds, err := openFiles(fdDir)
		ts.Check(err)
		ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(strings.Join(fds, "\n")+"\n"), 0o644))
		ts.Logf("daemonfds: %d open", len(fds))
		return
	}
	saved := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(ts.ReadFile(args[1])), "\n") {
		saved[l]++
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		fds, err := openFiles(fdDir)
		ts.Check(err)
		left := maps.Clone(saved)
		var extra []string
		for _, fd := range fds {
			if left[fd] == 0 {
				extra = append(extra, fd)
				continue
			}
			left[fd]--
		}
		if len(extra) == 0 {
			ts.Logf("daemonfds: %d open", len(fds))
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("daemonfds: after 30s the daemon still holds %d descriptors it did not hold before:\n%s", len(extra), strings.Join(extra, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openFiles lists the targets of the descriptors in fdDir (/proc/PID/fd), sorted. A pipe whose
// both ends the process holds is left out: it serves no other process, and Go's splice (the
// gateway copying between two TCP connections) keeps such pipes in a pool the garbage collector
// empties, at a time no script can choose.
func openFiles(fdDir string) ([]string, error) {
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, err
	}
	var fds []string
	pipeEnds := map[string][2]bool{} // pipe → whether a read end, a write end is held
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // closed since the listing
		}
		if err != nil {
			return nil, err
		}
		info, _ := os.ReadFile(filepath.Join(filepath.Dir(fdDir), "fdinfo", e.Name()))
		switch {
		case strings.HasPrefix(target, "pipe:"):
			ends := pipeEnds[target]
			ends[fdAccessMode(string(info))&1] = true // O_RDONLY 0, O_WRONLY 1
			pipeEnds[target] = ends
		case target == "anon_inode:[pidfd]":
			// Which process it holds says whose it is (Pid: -1 once that process is reaped).
			target += " pid " + fdInfoField(string(info), "Pid")
		}
		fds = append(fds, target)
	}
	fds = slices.DeleteFunc(fds, func(fd string) bool { return pipeEnds[fd] == [2]bool{true, true} })
	slices.Sort(fds)
	return fds, nil
}

// fdInfoField is the value of one field of /proc/PID/fdinfo/N ("" if it has none).
func fdInfoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// fdAccessMode is the O_ACCMODE part of the flags in a /proc/PID/fdinfo/N (octal there).
func fdAccessMode(info string) int {
	flags, _ := strconv.ParseInt(fdInfoField(info, "flags"), 8, 64)
	return int(flags & syscall.O_ACCMODE)
}

// cmdWaitfor: waitfor SECONDS CMD ARGS... runs hiloop CMD until it succeeds.
func cmdWaitfor(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: waitfor SECONDS hiloop-args...")
	}
	secs, err := strconv.Atoi(args[0])
	ts.Check(err)
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	bin, err := lookPath("hiloop", ts.Getenv("PATH"))
	ts.Check(err)
	for {
		cmd := exec.Command(bin, args[1:]...)
		cmd.Env = scriptEnv(ts)
		out, err := cmd.CombinedOutput()
		if (err == nil) != neg {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("waitfor %v: still failing after %ds: %v\n%s", args[1:], secs, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cmdExits: exits CODE CMD ARGS... runs CMD and fails unless it exits with CODE; its output
// is the script's stdout and stderr for the next checks.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE CMD ARGS...")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	bin, err := lookPath(args[1], ts.Getenv("PATH"))
	ts.Check(err)
	cmd := exec.Command(bin, args[2:]...)
	cmd.Dir = ts.Getenv("WORK")
	cmd.Env = scriptEnv(ts)
	cmd.Stdout, cmd.Stderr = ts.Stdout(), ts.Stderr()
	err = cmd.Run()
	got := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		got = ee.ExitCode()
	} else {
		ts.Check(err)
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", strings.Join(args[1:], " "), got, want)
	}
}

// cmdFreeport: freeport VAR... sets each VAR to a distinct TCP port of 127.0.0.1 that the kernel
// just handed out and nothing listens on, so that no script depends on a fixed port being free.
func cmdFreeport(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: freeport VAR...")
	}
	var held []net.Listener // held until all are chosen, so the ports differ
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for _, name := range args {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		ts.Check(err)
		held = append(held, l)
		ts.Setenv(name, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
}

// cmdKillInit: killinit NAME kills the sandbox's init (PID 1 inside) with SIGKILL from the
// host, as an OOM kill or an operator would.
func cmdKillInit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: killinit NAME")
	}
	ts.Check(syscall.Kill(sandboxInit(ts, args[0]), syscall.SIGKILL))
}

// cmdSignalInit: signalinit NAME STOP|CONT stops or continues the sandbox's init from the host:
// a stopped init is the one that deterministically does not answer a ping.
func cmdSignalInit(ts *testscript.TestScript, neg bool, args []string) {
	sigs := map[string]syscall.Signal{"STOP": syscall.SIGSTOP, "CONT": syscall.SIGCONT}
	sig, ok := sigs[strings.ToUpper(strings.Join(args[1:], ""))]
	if neg || len(args) != 2 || !ok {
		ts.Fatalf("usage: signalinit NAME STOP|CONT")
	}
	ts.Check(syscall.Kill(sandboxInit(ts, args[0]), sig))
}

// cmdSandboxPids: sandboxpids NAME VAR sets $VAR to the host's pids of every process of the
// sandbox (all of its PID namespace), its init's first, so that a script reads from the host
// what the sandbox keeps from its own users: another user's /proc/PID/environ, and through
// /proc/PID/root the filesystem exactly as the sandbox sees it.
func cmdSandboxPids(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: sandboxpids NAME VAR")
	}
	init := sandboxInit(ts, args[0])
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	ts.Check(err)
	pids := []string{strconv.Itoa(init)}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if other, err := os.Readlink(filepath.Join(p, "ns/pid")); err == nil && other == ns && filepath.Base(p) != pids[0] {
			pids = append(pids, filepath.Base(p))
		}
	}
	ts.Setenv(args[1], strings.Join(pids, " "))
}

// cmdWaitCgroup: waitcgroup SECONDS NAME FILE REGEXP waits until the sandbox's cgroup file FILE
// (pids.events, say), read from the host, matches REGEXP; its content is the script's stdout.
// The host sees what a sandbox too busy to answer an exec cannot report itself.
func cmdWaitCgroup(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 4 {
		ts.Fatalf("usage: waitcgroup SECONDS NAME FILE REGEXP")
	}
	secs, err := strconv.Atoi(args[0])
	ts.Check(err)
	re, err := regexp.Compile("(?m)" + args[3]) // multi-line, as stdout's
	ts.Check(err)
	cgroup := sandboxCgroup(ts, args[1])
	controller, _, _ := strings.Cut(args[2], ".")
	paths := []string{
		filepath.Join("/sys/fs/cgroup", cgroup, args[2]),             // cgroup v2
		filepath.Join("/sys/fs/cgroup", controller, cgroup, args[2]), // v1: under its controller
	}
	// On v1 a controller the daemon's own cgroup is nested in holds the sandbox's below it.
	if own, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for line := range strings.Lines(string(own)) {
			f := strings.SplitN(strings.TrimSpace(line), ":", 3)
			if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), controller) {
				paths = append(paths, filepath.Join("/sys/fs/cgroup", controller, f[2], cgroup, args[2]))
			}
		}
	}
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	for {
		var data []byte
		for _, p := range paths {
			if data, err = os.ReadFile(p); err == nil {
				break
			}
		}
		if err == nil && re.Match(data) {
			fmt.Fprint(ts.Stdout(), string(data))
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("waitcgroup: %s of sandbox %s does not match %q after %ds: %q (%v)", args[2], args[1], args[3], secs, data, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sandboxCgroup returns the name of the sandbox's cgroup, the same under every controller.
func sandboxCgroup(ts *testscript.TestScript, name string) string {
	d := ts.Value(daemonKey).(*scriptDaemon)
	c, err := client.New("unix://"+d.socket, "")
	ts.Check(err)
	sb, err := c.GetSandbox(context.Background(), name)
	ts.Check(err)
	return runtime.CgroupPrefix(filepath.Join(d.dataDir, "runtime")) + sb.ID
}

// sandboxInit returns the host's pid of the sandbox's init, found by the sandbox's cgroup.
func sandboxInit(ts *testscript.TestScript, name string) int {
	cgroup := sandboxCgroup(ts, name)
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cg, _ := os.ReadFile(filepath.Join(p, "cgroup"))
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		if strings.Contains(string(cg), "/"+cgroup+"\n") && strings.HasPrefix(string(cmdline), "/.hiloop/init") {
			pid, _ := strconv.Atoi(filepath.Base(p))
			return pid
		}
	}
	ts.Fatalf("no init found for sandbox %s (cgroup %s)", name, cgroup)
	return 0
}

// cmdWaitSession: waitsession SESSION STATE | waitsession SESSION event REGEXP waits up to 30 s
// until the session is in STATE (idle, running, waiting_permission), or until one of its events'
// JSON matches REGEXP.
func cmdWaitSession(ts *testscript.TestScript, neg bool, args []string) {
	if neg || !(len(args) == 2 || len(args) == 3 && args[1] == "event") {
		ts.Fatalf("usage: waitsession SESSION STATE | waitsession SESSION event REGEXP")
	}
	var re *regexp.Regexp
	if len(args) == 3 {
		var err error
		re, err = regexp.Compile(args[2])
		ts.Check(err)
	}
	d := ts.Value(daemonKey).(*scriptDaemon)
	c, err := client.New("unix://"+d.socket, "")
	ts.Check(err)
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if re == nil {
			se, err := c.GetSession(ctx, args[0])
			ts.Check(err)
			if string(se.State) == args[1] {
				return
			}
		} else {
			evs, err := c.Events(ctx, args[0], 0, 0)
			ts.Check(err)
			for _, ev := range evs {
				b, _ := json.Marshal(ev)
				if re.Match(b) {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			ts.Fatalf("waitsession %s: not reached after 30s", strings.Join(args, " "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cmdCapture: capture VAR sets $VAR to the last command's stdout without surrounding space (a
// session id printed by `hiloop session new`).
func cmdCapture(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: capture VAR")
	}
	v := strings.TrimSpace(ts.ReadFile("stdout"))
	if v == "" || strings.ContainsAny(v, " \n") {
		ts.Fatalf("capture %s: want one word on stdout, got %q", args[0], v)
	}
	ts.Setenv(args[0], v)
}

// cmdStreamCheck: streamcheck SESSION DROPS OUT watches the session's stream from seq 0 over raw
// WebSockets, hanging up after a random number of events DROPS times and reconnecting from the
// last seq received, until the turn_end of the session's last turn (the one running, or the next
// one if it is idle); it fails unless every event came exactly once, in order, and writes them as
// JSON lines to OUT (as `session events -o json` does).
func cmdStreamCheck(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: streamcheck SESSION DROPS OUT")
	}
	drops, err := strconv.Atoi(args[1])
	ts.Check(err)
	d := ts.Value(daemonKey).(*scriptDaemon)
	httpClient := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", d.socket)
		},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New("unix://"+d.socket, "")
	ts.Check(err)
	se, err := c.GetSession(ctx, args[0])
	ts.Check(err)
	var (
		out        []byte
		last       uint64
		reconnects int
		slow       int
		prompts    int
	)
	for done := false; !done; {
		conn, _, err := websocket.Dial(ctx, fmt.Sprintf("ws://sandboxd/v1/sessions/%s/stream?after=%d", args[0], last), &websocket.DialOptions{HTTPClient: httpClient})
		ts.Check(err)
		conn.SetReadLimit(64 << 20)
		budget := -1 // read until the end
		if reconnects < drops {
			budget = 1 + rand.IntN(100)
		}
		for budget != 0 {
			typ, msg, err := conn.Read(ctx)
			if websocket.CloseStatus(err) == api.StreamCloseSlow {
				slow++ // cut off for falling behind: reconnect from the cursor, like a drop
				break
			}
			if err != nil {
				ts.Fatalf("stream read after seq %d: %v", last, err)
			}
			var ev api.SessionEvent
			if typ != websocket.MessageText || json.Unmarshal(msg, &ev) != nil {
				ts.Fatalf("stream sent a message that is not an event: %q", msg)
			}
			if ev.Seq != last+1 {
				ts.Fatalf("stream sent seq %d after %d (reconnect %d)", ev.Seq, last, reconnects)
			}
			last = ev.Seq
			line, err := json.Marshal(ev)
			ts.Check(err)
			out = append(append(out, line...), '\n')
			switch ev.Type {
			case api.EventPrompt:
				prompts++
			case api.EventTurnEnd:
				done = prompts > 0 && ev.Seq >= se.LastSeq
			}
			if done {
				break
			}
			budget--
		}
		conn.CloseNow()
		if !done && budget == 0 {
			reconnects++
		}
	}
	ts.Logf("streamcheck: %d events over %d reconnects, cut off as slow %d times", last, reconnects, slow)
	if reconnects < drops {
		ts.Fatalf("the turn ended after %d reconnects, before %d: make it longer", reconnects, drops)
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[2]), out, 0o644))
}

// scriptEnv is the environment a script's exec would get.
func scriptEnv(ts *testscript.TestScript) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "HILOOP_HOST", "HILOOP_TOKEN", "HILOOP_REMOTE", "HILOOP_CONFIG_DIR", "GIT_SSH_COMMAND"} {
		if v := ts.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// cmdLeakcheck fails if the script's daemon left a mount, loop device or container behind for
// a sandbox that is not running (it asks the daemon which ones run, if it is up).
func cmdLeakcheck(ts *testscript.TestScript, neg bool, args []string) {
	d := ts.Value(daemonKey).(*scriptDaemon)
	leaks := d.leaks(ts)
	// A spare being made, replaced or removed in the background settles within moments.
	for deadline := time.Now().Add(5 * time.Second); len(leaks) > 0 && !neg && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		leaks = d.leaks(ts)
	}
	if len(leaks) > 0 && !neg {
		ts.Fatalf("leaks:\n%s", strings.Join(leaks, "\n"))
	}
	if len(leaks) == 0 && neg {
		ts.Fatalf("expected leaks, found none")
	}
}

// leaks lists what hostleaks.Find finds of the daemon's that no running sandbox, none of its ready
// spares and none of its pools explains.
func (d *scriptDaemon) leaks(ts *testscript.TestScript) []string {
	var running []string
	if d.cmd != nil {
		c, err := client.New("unix://"+d.socket, "")
		ts.Check(err)
		list, err := c.ListSandboxes(context.Background())
		ts.Check(err)
		for _, sb := range list {
			if sb.State == api.StateRunning {
				running = append(running, sb.ID)
			}
		}
		v, err := c.Version(context.Background())
		ts.Check(err)
		running = append(running, v.Spares.IDs...)
		// A running daemon keeps its volume and root layer pools and their shared mount points.
		for _, pool := range []string{"volumes", "layers"} {
			dir := filepath.Join(d.dataDir, pool)
			running = append(running, dir+"\n", dir+".pool.img\n", filepath.Join(dir, "mnt")+"\n")
		}
	}
	var leaks []string
	for _, l := range hostleaks.Find(d.dataDir) {
		if !slices.ContainsFunc(running, func(id string) bool { return strings.Contains(l+"\n", id) }) {
			leaks = append(leaks, l)
		}
	}
	return leaks
}
