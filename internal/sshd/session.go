package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	glider "github.com/gliderlabs/ssh"
	gossh "golang.org/x/crypto/ssh"

	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/pkg/api"
)

// Commands run in the sandbox as this user, in this directory.
const (
	sessionUser = "agent"
	sessionDir  = "/workspace"
)

// sftpServer is where Debian's openssh-sftp-server puts the server side of sftp and scp.
const sftpServer = "/usr/lib/openssh/sftp-server"

var (
	// loginShell is what a shell request runs: the user's shell as a login shell.
	loginShell = []string{"/bin/sh", "-c", `exec "${SHELL:-/bin/sh}" -l`}
	// sftpCommand runs the sftp server, or says why there is none.
	sftpCommand = []string{"/bin/sh", "-c", `[ -x ` + sftpServer + ` ] && exec ` + sftpServer + `
echo "hiloop: this sandbox's image has no SFTP server (` + sftpServer + `): install openssh-sftp-server in it" >&2
exit 1`}
)

// execCommand is what an exec request runs: cmd through the user's shell, as sshd does.
func execCommand(cmd string) []string {
	return []string{"/bin/sh", "-c", `exec "${SHELL:-/bin/sh}" -c "$1"`, "sh", cmd}
}

// ptyRequest is the payload of "pty-req" (RFC 4254 6.2).
type ptyRequest struct {
	Term                    string
	Columns, Rows           uint32
	WidthPixel, HeightPixel uint32
	Modes                   string
}

// windowChange is the payload of "window-change" (RFC 4254 6.7).
type windowChange struct {
	Columns, Rows           uint32
	WidthPixel, HeightPixel uint32
}

// session is one "session" channel: requests set it up until a shell, exec or subsystem
// request starts its one process.
type session struct {
	srv     *Server
	sandbox string // its key
	name    string // as the client named it, for messages
	ch      gossh.Channel
	env     []string
	pty     *ptyRequest
}

func (s *Server) handleSession(_ *glider.Server, conn *gossh.ServerConn, nc gossh.NewChannel, ctx glider.Context) {
	if !s.enter() {
		_ = nc.Reject(gossh.ResourceShortage, "the server is shutting down")
		return
	}
	defer s.wg.Done()
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	sess := &session{srv: s, sandbox: sandboxOf(conn), name: conn.User(), ch: ch}
	for req := range reqs {
		var argv []string
		switch req.Type {
		case "env":
			var kv struct{ Name, Value string }
			if gossh.Unmarshal(req.Payload, &kv) != nil || kv.Name == "" || strings.ContainsRune(kv.Name, '=') {
				reply(req, false)
				continue
			}
			sess.env = append(sess.env, kv.Name+"="+kv.Value)
			reply(req, true)
			continue
		case "pty-req":
			var p ptyRequest
			if sess.pty != nil || gossh.Unmarshal(req.Payload, &p) != nil {
				reply(req, false)
				continue
			}
			sess.pty = &p
			reply(req, true)
			continue
		case "window-change":
			var w windowChange
			ok := sess.pty != nil && gossh.Unmarshal(req.Payload, &w) == nil
			if ok {
				sess.pty.Columns, sess.pty.Rows = w.Columns, w.Rows
			}
			reply(req, ok)
			continue
		case "shell":
			argv = loginShell
		case "exec":
			var cmd struct{ Command string }
			if gossh.Unmarshal(req.Payload, &cmd) != nil {
				reply(req, false)
				continue
			}
			argv = execCommand(cmd.Command)
		case "subsystem":
			var sub struct{ Name string }
			if gossh.Unmarshal(req.Payload, &sub) != nil || sub.Name != "sftp" {
				reply(req, false)
				continue
			}
			argv = sftpCommand
			sess.pty = nil // sftp speaks binary on plain stdio
		default:
			// x11-req, auth-agent-req@openssh.com, signal or break before a command, ...
			reply(req, false)
			continue
		}
		reply(req, true)
		sess.run(ctx, argv, reqs)
		return
	}
	ch.Close() // the client went away before asking for a command
}

func reply(req *gossh.Request, ok bool) {
	if req.WantReply {
		_ = req.Reply(ok, nil)
	}
}

// run runs argv in the sandbox, serves the channel's remaining requests, and ends the channel
// with the process's exit status.
func (sess *session) run(ctx context.Context, argv []string, reqs <-chan *gossh.Request) {
	s := sess.srv
	spec := runtime.ExecSpec{Argv: argv, Env: sess.env, Dir: sessionDir, User: sessionUser}
	if p := sess.pty; p != nil {
		spec.TTY = true
		spec.Rows, spec.Cols = clampSize(p.Rows), clampSize(p.Columns)
		if p.Term != "" {
			spec.Env = append(spec.Env, "TERM="+p.Term)
		}
	}
	proc, err := s.cfg.Sandboxes.Exec(ctx, sess.sandbox, spec)
	if err != nil {
		// Still serve requests until the channel closes so the client sees its exit.
		s.goTracked(func() { discardRequests(reqs) })
		sess.fail(startError(sess.name, err))
		return
	}

	// Requests after the start: resizes and signals; when the channel closes or the connection
	// dies, the process tree goes with it (a no-op once the process has exited).
	s.goTracked(func() {
		for req := range reqs {
			switch req.Type {
			case "window-change":
				var w windowChange
				ok := spec.TTY && gossh.Unmarshal(req.Payload, &w) == nil
				if ok {
					_ = proc.Resize(clampSize(w.Rows), clampSize(w.Columns))
				}
				reply(req, ok)
			case "signal":
				var sig struct{ Name string }
				n := 0
				if gossh.Unmarshal(req.Payload, &sig) == nil {
					n = signalNumber(sig.Name)
				}
				reply(req, n != 0 && proc.Signal(n) == nil)
			default:
				reply(req, false)
			}
		}
		_ = proc.Kill()
	})
	// Stdin: the client's EOF closes the process's stdin; with a PTY that types the terminal's EOF
	// character until the command takes it, as for an exec (docs/api.md).
	s.goTracked(func() {
		_, _ = copyBuffered(proc.Stdin(), sess.ch)
		_ = proc.Stdin().Close()
	})
	var out sync.WaitGroup
	pump := func(w io.Writer, r io.Reader) {
		if r == nil {
			return
		}
		out.Add(1)
		go func() {
			defer out.Done()
			if _, err := copyBuffered(w, r); err != nil {
				_, _ = io.Copy(io.Discard, r) // the client is gone; let the process finish
			}
		}()
	}
	pump(sess.ch, proc.Stdout())
	pump(sess.ch.Stderr(), proc.Stderr())

	status, err := proc.Wait()
	out.Wait()
	if err != nil {
		msg := fmt.Sprintf("hiloop: %v", err)
		if errors.Is(err, runtime.ErrSandboxDied) {
			msg = fmt.Sprintf("hiloop: sandbox %q stopped while the command was running", sess.name)
		}
		sess.fail(msg)
		return
	}
	_ = sess.ch.CloseWrite()
	if status.Signal != 0 {
		_, _ = sess.ch.SendRequest("exit-signal", false, gossh.Marshal(struct {
			Signal     string
			CoreDumped bool
			Message    string
			Lang       string
		}{Signal: signalName(status.Signal)}))
	}
	// After an exit-signal too: OpenSSH's client ignores exit-signal and would exit 255; with
	// exit-status it exits 128+n, as a local shell does.
	sess.exit(status.ExitCode())
}

// fail tells the client why nothing runs (or ran) and ends the session with status 1.
func (sess *session) fail(msg string) {
	eol := "\n"
	if sess.pty != nil {
		eol = "\r\n" // the client's terminal is raw
	}
	_, _ = io.WriteString(sess.ch.Stderr(), msg+eol)
	_ = sess.ch.CloseWrite()
	sess.exit(1)
}

func (sess *session) exit(code int) {
	_, _ = sess.ch.SendRequest("exit-status", false, gossh.Marshal(struct{ Status uint32 }{uint32(code)}))
	_ = sess.ch.Close()
}

// startError is the message for an Exec that failed.
func startError(sandbox string, err error) string {
	if stopped(err) {
		return stoppedMessage(sandbox)
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		return "hiloop: " + ae.Message
	}
	return fmt.Sprintf("hiloop: start the command in sandbox %q: %v", sandbox, err)
}

func stoppedMessage(sandbox string) string {
	return fmt.Sprintf("hiloop: sandbox %q is stopped: start it with `hiloop sandbox start %s` (or use hiloop sandbox ssh --start)", sandbox, sandbox)
}

// stopped reports whether err says the sandbox does not run.
func stopped(err error) bool {
	var ae *api.Error
	return errors.Is(err, runtime.ErrNotRunning) || (errors.As(err, &ae) && ae.Code == api.CodeSandboxNotRunning)
}

func discardRequests(reqs <-chan *gossh.Request) {
	for req := range reqs {
		reply(req, false)
	}
}

func clampSize(n uint32) uint16 {
	return uint16(min(n, 0xffff))
}

// linuxSignals numbers the signals by their SSH names (RFC 4254 6.10: the name without "SIG"),
// as Linux numbers them: the sandbox runs Linux whatever the daemon's build target.
var linuxSignals = []string{1: "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1",
	"SEGV", "USR2", "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU",
	"URG", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS"}

func signalNumber(name string) int {
	for n, s := range linuxSignals {
		if s != "" && s == name {
			return n
		}
	}
	return 0
}

func signalName(n int) string {
	if n > 0 && n < len(linuxSignals) {
		return linuxSignals[n]
	}
	return fmt.Sprintf("SIG%d@hiloop", n)
}
