package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// The terminal every tmux pane of a script gets, so that screens are the same on every machine.
const (
	tmuxWidth  = "100"
	tmuxHeight = "30"
)

// scriptsExpired is closed shortly before the test binary's -timeout (testenv.Deadline), so
// that a wait on a screen that never comes fails with its own message in every script.
var scriptsExpired = make(chan struct{})

const tmuxKey = "tmux"

// scriptTmux is the tmux server of one script: its own socket and configuration, killed when the
// script ends.
type scriptTmux struct{ socket, conf string }

// cmdTmux drives full-screen programs in a real terminal, tmux:
//
//	tmux start NAME CMD ARGS...  runs CMD (looked up in the script's PATH, with its environment,
//	                             TERM=xterm-256color and NO_COLOR=1) in a new 100x30 pane; the
//	                             pane stays after CMD exits, showing "Pane is dead (status N, ...)"
//	tmux send NAME KEYS...       types KEYS as tmux send-keys takes them: text, or key names such
//	                             as Enter, C-c, C-d, Up, Escape
//	tmux wait NAME REGEXP        waits until the visible screen matches REGEXP
//	tmux screen NAME             writes the pane, scrollback and screen, to stdout
func cmdTmux(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: tmux start NAME CMD ARGS... | send NAME KEYS... | wait NAME REGEXP | screen NAME")
	}
	t := tmuxServer(ts)
	name := args[1]
	switch args[0] {
	case "start":
		if len(args) < 3 {
			ts.Fatalf("usage: tmux start NAME CMD ARGS...")
		}
		bin, err := lookPath(args[2], ts.Getenv("PATH"))
		ts.Check(err)
		// -x/-y size a detached session; the window follows the session's size.
		t.run(ts, append([]string{"new-session", "-d", "-s", name, "-x", tmuxWidth, "-y", tmuxHeight, "--", bin}, args[3:]...)...)
	case "send":
		if len(args) < 3 {
			ts.Fatalf("usage: tmux send NAME KEYS...")
		}
		t.run(ts, append([]string{"send-keys", "-t", name}, args[2:]...)...)
	case "wait":
		if len(args) != 3 {
			ts.Fatalf("usage: tmux wait NAME REGEXP")
		}
		re, err := regexp.Compile(args[2])
		ts.Check(err)
		var screen string
		// A screen that has not matched within tmuxWaitLimit will not: fail then, not at the
		// end of the whole run, which would hold CI for minutes.
		limit := time.After(tmuxWaitLimit)
		for {
			// The pane's state comes with its screen, in one tmux command.
			out := t.run(ts, "capture-pane", "-p", "-t", name, ";", "display-message", "-p", "-t", name, paneExitFormat)
			var state string
			screen, state = splitLastLine(out)
			if re.MatchString(screen) {
				return
			}
			reapLostExit(ts, state)
			select {
			case <-scriptsExpired:
				ts.Fatalf("tmux wait %s %q: the screen never matched; it shows:\n%s", name, args[2], screen)
			case <-limit:
				ts.Fatalf("tmux wait %s %q: the screen did not match within %s; it shows:\n%s\n%s", name, args[2], tmuxWaitLimit, screen, t.paneState(ts, name))
			case <-time.After(50 * time.Millisecond):
			}
		}
	case "screen":
		screen := t.run(ts, "capture-pane", "-p", "-S", "-", "-E", "-", "-t", name)
		_, err := ts.Stdout().Write([]byte(strings.TrimRight(screen, "\n") + "\n"))
		ts.Check(err)
	default:
		ts.Fatalf("usage: tmux start|send|wait|screen NAME ...")
	}
}

// paneExitFormat is what reapLostExit reads of a pane: whether it is dead, its exit status if
// tmux has it, and the tmux server's pid.
const paneExitFormat = "#{pane_dead} status=#{pane_dead_status} server=#{pid}"

// splitLastLine splits tmux's output into what came before its last line and that line.
func splitLastLine(out string) (before, last string) {
	out = strings.TrimSuffix(out, "\n")
	i := strings.LastIndexByte(out, '\n')
	return out[:i+1], out[i+1:]
}

// reapLostExit makes tmux reap a pane whose program ended without tmux hearing of it. tmux
// built with libutempter (Debian's is) runs its utmp helper as soon as a pane's terminal
// closes, with SIGCHLD set to its default, discarded, meanwhile; a program that ends while the
// helper runs (its terminal closes just before its exit) is never reaped: the pane is dead with
// no status and no "Pane is dead" line, and its program a zombie (tmux issues 311 and 4559).
// Under load that is one quit in a few. A SIGCHLD makes the server reap its children, and
// changes nothing for a pane whose program still ends.
func reapLostExit(ts *testscript.TestScript, state string) {
	dead, rest, _ := strings.Cut(state, " ")
	if dead != "1" || !strings.HasPrefix(rest, "status= ") {
		return
	}
	_, server, _ := strings.Cut(rest, "server=")
	if pid, err := strconv.Atoi(server); err == nil && pid > 0 {
		ts.Check(syscall.Kill(pid, syscall.SIGCHLD))
	}
}

// tmuxWaitLimit bounds one tmux wait: generous for a loaded machine, short beside a CI run.
const tmuxWaitLimit = 60 * time.Second

// tmuxServer returns the script's tmux, set up on first use.
func tmuxServer(ts *testscript.TestScript) *scriptTmux {
	if t, ok := ts.Value(tmuxKey).(*scriptTmux); ok && t.socket != "" {
		return t
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		ts.Fatalf("tmux is not installed: `make deps` installs it")
	}
	t := ts.Value(tmuxKey).(*scriptTmux)
	// A short socket path: the script's work directory can be longer than a socket's limit.
	dir, err := os.MkdirTemp("/tmp", "hltmux")
	ts.Check(err)
	t.socket, t.conf = filepath.Join(dir, "s"), filepath.Join(dir, "tmux.conf")
	ts.Check(os.WriteFile(t.conf, []byte("set -g remain-on-exit on\nset -g history-limit 100000\nset -g status off\n"), 0o644))
	ts.Defer(func() {
		_ = exec.Command("tmux", "-S", t.socket, "kill-server").Run()
		os.RemoveAll(dir)
	})
	return t
}

// run runs a tmux command on the script's server and returns its stdout.
func (t *scriptTmux) run(ts *testscript.TestScript, args ...string) string {
	cmd := exec.Command("tmux", append([]string{"-S", t.socket, "-f", t.conf}, args...)...)
	// The server, started by the first command, passes its environment to every pane.
	cmd.Env = append(scriptEnv(ts), "TERM=xterm-256color", "NO_COLOR=1", "LANG=C.UTF-8")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		ts.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

// paneState says, for a failed wait, whether the pane's program still runs and where it waits:
// tmux's view of the pane, then the process's state and kernel wait channel, and its threads'.
func (t *scriptTmux) paneState(ts *testscript.TestScript, name string) string {
	out := t.run(ts, "list-panes", "-t", name, "-F", "dead=#{pane_dead} status=#{pane_dead_status} pid=#{pane_pid}")
	var pid int
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "pid="); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid == 0 {
		return "pane: " + out
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pane: %s", out)
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for line := range strings.Lines(string(st)) {
			if strings.HasPrefix(line, "State:") || strings.HasPrefix(line, "Threads:") {
				b.WriteString(line)
			}
		}
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", pid))
	for _, w := range tasks {
		if c, err := os.ReadFile(w); err == nil {
			fmt.Fprintf(&b, "%s: %s\n", filepath.Base(filepath.Dir(w)), c)
		}
	}
	return b.String()
}
