package api

import (
	"fmt"
	"strings"
	"time"
)

// The exec stream is a WebSocket at GET /v1/sandboxes/{name}/exec. The client's first message is
// an ExecRequest (text). After that, binary messages carry data with the stream id in the first
// byte (StreamStdin from the client; StreamStdout and StreamStderr from the daemon) and text
// messages carry ExecControl values. The daemon's last message is an ExecControl of type "exit"
// or "error"; then it closes the socket.
//
// Flow control keeps the socket free for keepalives however slowly either end consumes data: a
// peer never has more unacknowledged data in flight than the other end's window, so each end
// reads the socket continuously and a command that reads its stdin late, or a client whose
// stdout is a slow pipe, holds data back instead of looking like a dead peer. A client that
// sets ExecRequest.Window acknowledges the stdout and stderr bytes it has written out with
// "ack" controls, and the daemon sends no more than Window bytes beyond them; the daemon's
// "started" control carries its own Window for stdin, which it acknowledges likewise as the
// command reads. One data message never carries more than its receiver's window, so that a
// receiver can keep what it has not consumed in a buffer of the window's size. A peer that sends no window gets none of this (the older protocol): writes
// then block the socket until the other end consumes them.

// A client on the daemon's unix socket may hand the daemon its own stdin, stdout and stderr
// instead of streaming them (the handoff): it sends their descriptors (SCM_RIGHTS) with the
// first bytes of the HTTP request and names them, in order, in the ExecHandoffHeader, e.g.
// "stdout,stderr". The daemon moves the data between them and the command's pipes itself
// (splice(2): no copy through user space, no flow control needed, a slow reader holds the
// command back as a local pipe would), and its "started" control lists in HandedOff the streams
// it took; the others stream as usual. It takes only pipes and regular files, never for a TTY,
// and stdin only with ExecRequest.Stdin. A descriptor never reaches the sandbox.

// ExecHandoffHeader names the streams whose descriptors came with the exec request.
const ExecHandoffHeader = "Hiloop-Exec-Handoff"

// Stream names in ExecHandoffHeader and ExecControl.HandedOff.
const (
	StreamNameStdin  = "stdin"
	StreamNameStdout = "stdout"
	StreamNameStderr = "stderr"
)

// Stream ids of binary exec messages.
const (
	StreamStdin  byte = 0
	StreamStdout byte = 1
	StreamStderr byte = 2
)

// MaxExecTimeout bounds ExecRequest.TimeoutMS.
const MaxExecTimeout = 7 * 24 * time.Hour

// ExecRequest starts a command in a running sandbox.
type ExecRequest struct {
	// Command is the program and its arguments, e.g. ["ls", "-la"].
	Command []string `json:"command"`
	// Env holds extra KEY=VALUE pairs on top of the login environment.
	Env []string `json:"env,omitempty"`
	// WorkDir is the working directory; empty means the image's WORKDIR, else /workspace.
	WorkDir string `json:"workdir,omitempty"`
	// User is the user to run as (default agent).
	User string `json:"user,omitempty"`
	// Stdin forwards the client's stdin; without it the command reads EOF.
	Stdin bool `json:"stdin,omitempty"`
	// TTY gives the command a pseudo-terminal of Rows x Cols.
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// TimeoutMS kills the command's whole process tree after this many milliseconds (0: none).
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Window is how many bytes of stdout and stderr the client takes before it acknowledges
	// them (see flow control above), e.g. 4194304; 0: no flow control.
	Window int64 `json:"window,omitempty"`
}

// MaxExecWindow bounds a flow-control window, so that what a peer buffers stays bounded.
const MaxExecWindow = 64 << 20

// Defaults for ExecRequest.
const (
	DefaultExecUser    = "agent"
	DefaultExecWorkDir = "/workspace"
)

// Validate checks an exec request and fills its defaults, reporting every invalid value
// together (Problems).
func (r *ExecRequest) Validate() error {
	var ps Problems
	if len(r.Command) == 0 || r.Command[0] == "" {
		ps.Addf("command", CodeInvalidArgument, "command is empty: give the program to run after --")
	}
	for i, kv := range r.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsAny(k, "\x00") {
			ps.Addf(fmt.Sprintf("env[%d]", i), CodeInvalidArgument, "invalid env %q: use KEY=VALUE", kv)
		}
	}
	// An empty WorkDir stays empty: the sandbox's image decides (sandbox.Manager.ExecWorkDir).
	if r.WorkDir != "" && !strings.HasPrefix(r.WorkDir, "/") {
		ps.Addf("workdir", CodeInvalidArgument, "invalid workdir %q: use an absolute path", r.WorkDir)
	}
	if r.User == "" {
		r.User = DefaultExecUser
	}
	// Compared in milliseconds: converting first would overflow a Duration and wrap around.
	if r.TimeoutMS < 0 || r.TimeoutMS > MaxExecTimeout.Milliseconds() {
		ps.Addf("timeout_ms", CodeInvalidArgument, "invalid timeout %dms: use 0 (none) up to %s", r.TimeoutMS, MaxExecTimeout)
	}
	if r.Window < 0 || r.Window > MaxExecWindow {
		ps.Addf("window", CodeInvalidArgument, "invalid window %d: use 0 (no flow control) up to %d bytes", r.Window, MaxExecWindow)
	}
	return ps.Err()
}

// Exec control message types.
const (
	ControlResize   = "resize"    // client: window size changed (Rows, Cols)
	ControlStdinEOF = "stdin_eof" // client: stdin is finished
	ControlSignal   = "signal"    // client: deliver Signal to the command
	ControlAck      = "ack"       // either: Bytes more of the other's data were consumed
	ControlStarted  = "started"   // daemon: the command runs (Window: its stdin window)
	ControlExit     = "exit"      // daemon: the command ended (ExitCode, Signal, TimedOut)
	ControlError    = "error"     // daemon: the exec failed (Error)
)

// ExecControl is a text message on the exec stream.
type ExecControl struct {
	Type string `json:"type"`
	// Rows and Cols come with "resize".
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// Signal is the signal number with "signal", or the killing signal with "exit".
	Signal int `json:"signal,omitempty"`
	// ExitCode comes with "exit": the command's code, or 128+signal.
	ExitCode int `json:"exit_code,omitempty"`
	// TimedOut says the exec was killed by its timeout.
	TimedOut bool `json:"timed_out,omitempty"`
	// OOMKilled comes with "exit": the command died of SIGKILL while the kernel killed a process
	// of the sandbox for its memory limit, MemoryLimitMB.
	OOMKilled     bool `json:"oom_killed,omitempty"`
	MemoryLimitMB int  `json:"memory_limit_mb,omitempty"`
	// Window comes with "started": the bytes of stdin the daemon takes before it acknowledges
	// them (0: the daemon has no flow control).
	Window int64 `json:"window,omitempty"`
	// HandedOff comes with "started": the streams whose descriptors the daemon took from the
	// client (see ExecHandoffHeader); no data messages flow for them.
	HandedOff []string `json:"handed_off,omitempty"`
	// Bytes comes with "ack": how many more bytes of data were consumed since the last ack.
	Bytes int64 `json:"bytes,omitempty"`
	// Error comes with "error".
	Error *Error `json:"error,omitempty"`
}
