//go:build linux

// Package initproc is hiloop-init, PID 1 of every sandbox: it reaps every child and orphan and
// serves execs on the unix socket the daemon passes it as fd 3 (protocol in proto.go).
//
// It runs inside the sandbox, is built static (CGO_ENABLED=0), and must not import anything
// that needs cgo or the host: the runtime package talks to it only through the socket.
package initproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// ListenFD is the fd number of the listening socket the daemon passes to the init.
const ListenFD = 3

// DefaultPath is the PATH every exec starts with.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// NofileSoft is the soft limit of open files every process of a sandbox starts with (or its
// hard limit, if that is lower).
const NofileSoft = 65536

// Main runs the init until the sandbox is killed; it returns only on a setup error.
func Main() int {
	// Where the daemon could not set it (see the runtime's containerConfig); set explicitly, it
	// is what children inherit, not the soft limit the init started with.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		lim.Cur = min(NofileSoft, lim.Max)
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	f := os.NewFile(ListenFD, "listener")
	if f == nil {
		fmt.Fprintln(os.Stderr, "hiloop-init: no listening socket on fd 3")
		return 1
	}
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "hiloop-init: fd 3: %v\n", err)
		return 1
	}
	s := NewServer("/")
	s.Start()
	// Stop sends SIGTERM to every process; the init stays up so the others get their grace
	// period (PID 1 dying would SIGKILL the whole namespace at once). A handler rather than
	// SIG_IGN, so children do not inherit an ignored SIGTERM.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	go func() {
		for range sigs {
		}
	}()
	// Serve returns only when the listener fails, which leaves the init nothing to serve.
	fmt.Fprintf(os.Stderr, "hiloop-init: %v\n", s.Serve(l))
	return 1
}

// Server spawns and reaps processes. Its zero value is not usable; call NewServer.
type Server struct {
	root string // prefix for /etc/passwd, /etc/group and /proc (tests use "/" too)

	// childOOMScoreAdj is given to every spawned process: 1000 above the init's own value.
	// The runtime starts the init at -1000 where it may (the daemon has CAP_SYS_RESOURCE), so
	// children get a neutral 0; where it may not, the init keeps the daemon's value and its
	// children rank far above it, which still makes a memory hog the victim, not the init.
	childOOMScoreAdj int
	// ownOOMScoreAdj is the init's value. At -1000 it was set by a privileged writer, which
	// also allows the init to return to it, so the init switches itself to the children's
	// value around each fork: children are born with it, before they can fork themselves.
	ownOOMScoreAdj int
	switchOOM      bool

	mu      sync.Mutex // held across fork+register and across each reaping pass
	waiters map[int]chan syscall.WaitStatus
}

// NewServer returns a server that reads users from root/etc.
func NewServer(root string) *Server {
	own := ownOOMScoreAdj()
	return &Server{
		root:             root,
		waiters:          make(map[int]chan syscall.WaitStatus),
		childOOMScoreAdj: ChildOOMScoreAdj(own),
		ownOOMScoreAdj:   own,
		switchOOM:        own == -1000,
	}
}

// ChildOOMScoreAdj returns the oom_score_adj for children of an init running at own.
func ChildOOMScoreAdj(own int) int {
	return max(-1000, min(1000, own+1000))
}

func setOwnOOMScoreAdj(v int) error {
	return os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(v)), 0)
}

func ownOOMScoreAdj() int {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return v
}

// Start starts reaping children (and, when PID 1, orphans).
func (s *Server) Start() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, unix.SIGCHLD)
	go func() {
		for range ch {
			s.reap()
		}
	}()
}

// reap collects every exited child, delivering statuses to registered waiters.
func (s *Server) reap() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if ch, ok := s.waiters[pid]; ok {
			delete(s.waiters, pid)
			ch <- ws
		}
	}
}

// Serve accepts connections until l is closed. Any other failure to accept (a full descriptor
// table, no kernel memory for a socket) passes, and is retried after a pause: the init ending
// would end the sandbox.
func (s *Server) Serve(l net.Listener) error {
	var pause time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			fmt.Fprintf(os.Stderr, "hiloop-init: accept: %v; retrying in %v\n", err, pause)
			time.Sleep(pause)
			continue
		}
		pause = 0
		go s.handle(NewConn(c.(*net.UnixConn)))
	}
}

func (s *Server) handle(c *Conn) {
	defer c.Close()
	var m Message
	files, err := c.Recv(&m)
	if err != nil {
		return
	}
	switch m.Op {
	case OpPing:
		closeAll(files)
		_ = c.Send(&Message{Op: OpPong})
	case OpExec:
		if m.Exec == nil || len(m.Exec.Argv) == 0 {
			closeAll(files)
			_ = c.Send(&Message{Op: OpExit, Code: 126, Error: "exec: empty command"})
			return
		}
		s.exec(c, m.Exec, files)
	default:
		closeAll(files)
		_ = c.Send(&Message{Op: OpExit, Code: 126, Error: fmt.Sprintf("unknown request %q", m.Op)})
	}
}

// startError is a failure to start a process, with the shell-style exit code it maps to.
type startError struct {
	msg  string
	code int
}

func (e *startError) Error() string { return e.msg }

func (s *Server) exec(c *Conn, req *ExecRequest, files []*os.File) {
	var (
		stdio  []*os.File
		master *os.File
	)
	if req.TTY {
		closeAll(files)
		m, t, err := pty.Open()
		if err != nil {
			_ = c.Send(&Message{Op: OpExit, Code: 126, Error: "open pty: " + err.Error()})
			return
		}
		if req.Rows > 0 && req.Cols > 0 {
			_ = pty.Setsize(m, &pty.Winsize{Rows: req.Rows, Cols: req.Cols})
		}
		master, stdio = m, []*os.File{t, t, t}
		defer t.Close()
		defer master.Close()
	} else {
		defer closeAll(files)
		if len(files) != 3 {
			_ = c.Send(&Message{Op: OpExit, Code: 126, Error: fmt.Sprintf("exec: want 3 stdio fds, got %d", len(files))})
			return
		}
		stdio = files
	}

	pid, ch, err := s.spawn(req, stdio)
	if err != nil {
		code := 126
		var se *startError
		if errors.As(err, &se) {
			code = se.code
		}
		_ = c.Send(&Message{Op: OpExit, Code: code, Error: err.Error()})
		return
	}
	started := &Message{Op: OpStarted, Pid: pid}
	if master != nil {
		err = c.Send(started, master)
		master.Close()
	} else {
		err = c.Send(started)
	}
	// Our copies of the process's stdio must go, or the daemon never sees EOF.
	if req.TTY {
		stdio[0].Close()
	} else {
		closeAll(files)
	}
	if err != nil {
		KillSession(pid)
		<-ch
		return
	}

	msgs := make(chan Message)
	connDone := make(chan struct{})
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		defer close(connDone)
		for {
			var m Message
			fs, err := c.Recv(&m)
			closeAll(fs)
			if err != nil {
				return
			}
			select {
			case msgs <- m:
			case <-finished: // the process is gone: read on, to EOF, and drop it
			}
		}
	}()
	for {
		select {
		case ws := <-ch:
			exit := &Message{Op: OpExit}
			if ws.Signaled() {
				exit.Signal = int(ws.Signal())
			} else {
				exit.Code = ws.ExitStatus()
			}
			_ = c.Send(exit)
			// Closing a packet socket with a message unread (a kill the daemon sent as the
			// process exited) resets it, and the daemon's next read fails with ECONNRESET
			// before it reaches the exit. So read until the daemon hangs up (it does once it
			// has the exit), for a second at most.
			_ = c.UnixConn().SetReadDeadline(time.Now().Add(time.Second))
			<-connDone
			return
		case m := <-msgs:
			switch m.Op {
			case OpSignal:
				if m.Signal > 0 {
					_ = unix.Kill(pid, unix.Signal(m.Signal))
				}
			case OpKill:
				KillSession(pid)
			}
		case <-connDone:
			// The daemon went away mid-exec: nobody can read the output or the exit any more.
			KillSession(pid)
			<-ch
			return
		}
	}
}

// spawn starts req with stdio as fds 0-2 in a new session and registers a waiter for it.
func (s *Server) spawn(req *ExecRequest, stdio []*os.File) (int, chan syscall.WaitStatus, error) {
	u, err := LookupUser(req.User, filepath.Join(s.root, "etc/passwd"), filepath.Join(s.root, "etc/group"))
	if err != nil {
		return 0, nil, &startError{msg: err.Error(), code: 126}
	}
	env := BuildEnv(u, req.TTY, req.Env)
	dir := req.Dir
	if dir == "" {
		dir = u.Home
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			dir = "/"
		}
	} else if st, err := os.Stat(dir); err != nil {
		return 0, nil, &startError{msg: fmt.Sprintf("chdir %q: %v", dir, unwrapPathError(err)), code: 126}
	} else if !st.IsDir() {
		return 0, nil, &startError{msg: fmt.Sprintf("chdir %q: not a directory", dir), code: 126}
	}
	path, err := LookPath(req.Argv[0], envValue(env, "PATH"), dir)
	if err != nil {
		return 0, nil, err
	}
	if req.TTY {
		// Like login: the terminal belongs to its user, so programs can reopen it by name.
		_ = stdio[0].Chown(int(u.UID), -1)
	}
	groups := append([]uint32{u.GID}, u.Groups...)
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []uintptr{stdio[0].Fd(), stdio[1].Fd(), stdio[2].Fd()},
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Setctty:    req.TTY,
			Ctty:       0,
			Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: groups},
		},
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switched := s.switchOOM && setOwnOOMScoreAdj(s.childOOMScoreAdj) == nil
	pid, err := syscall.ForkExec(path, req.Argv, attr)
	if switched {
		if rerr := setOwnOOMScoreAdj(s.ownOOMScoreAdj); rerr != nil {
			fmt.Fprintf(os.Stderr, "hiloop-init: restore oom_score_adj: %v\n", rerr)
			s.switchOOM = false
		}
	}
	if err != nil {
		return 0, nil, execError(req.Argv[0], err)
	}
	if !switched {
		// Children must be the OOM killer's choice, never the init: without the switch
		// around the fork, this is the best left, right after the exec.
		_ = os.WriteFile(filepath.Join("/proc", strconv.Itoa(pid), "oom_score_adj"), []byte(strconv.Itoa(s.childOOMScoreAdj)), 0)
	}
	ch := make(chan syscall.WaitStatus, 1)
	s.waiters[pid] = ch
	return pid, ch, nil
}

func execError(name string, err error) error {
	code := 126
	if errors.Is(err, syscall.ENOENT) {
		code = 127
	}
	return &startError{msg: fmt.Sprintf("exec: %q: %v", name, err), code: code}
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// LookPath finds file like a shell does: a name with a slash is used as is (relative to dir),
// anything else is searched in path. Errors read like os/exec's and carry exit codes 127
// (not found) or 126 (found but not executable).
func LookPath(file, path, dir string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", execError(file, err)
		}
		return file, nil
	}
	var denied error
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		err := checkExecutable(p)
		if err == nil {
			return p, nil
		}
		if errors.Is(err, syscall.EACCES) && denied == nil {
			denied = err
		}
	}
	if denied != nil {
		return "", execError(file, denied)
	}
	return "", &startError{msg: fmt.Sprintf("exec: %q: executable file not found in $PATH", file), code: 127}
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return unwrapPathError(err)
	}
	if st.IsDir() {
		return syscall.EACCES
	}
	if st.Mode()&0o111 == 0 {
		return syscall.EACCES
	}
	return nil
}

// BuildEnv returns a login-like environment for u with extra applied on top.
func BuildEnv(u *User, tty bool, extra []string) []string {
	env := []string{
		"HOME=" + u.Home,
		"USER=" + u.Name,
		"LOGNAME=" + u.Name,
		"SHELL=" + u.Shell,
		"PATH=" + DefaultPath,
	}
	if tty {
		env = append(env, "TERM=xterm-256color")
	}
	for _, kv := range extra {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		replaced := false
		for i, old := range env {
			if strings.HasPrefix(old, k+"=") {
				env[i] = kv
				replaced = true
				break
			}
		}
		if !replaced {
			env = append(env, kv)
		}
	}
	return env
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// KillSession SIGKILLs every process whose session id is sid, until none is left alive.
// A process that started its own session (setsid, daemonizing) escapes, by design.
func KillSession(sid int) {
	for range 200 {
		if killSessionPass(sid) == 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// killSessionPass signals the live members of sid once and returns how many it found.
func killSessionPass(sid int) int {
	d, err := os.Open("/proc")
	if err != nil {
		return 0
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	found := 0
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		state, session, ok := procStat(pid)
		if !ok || session != sid || state == 'Z' || state == 'X' {
			continue
		}
		found++
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	return found
}

// procStat returns the state and session id from /proc/<pid>/stat.
func procStat(pid int) (byte, int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	return parseStat(b)
}

// parseStat parses "pid (comm) state ppid pgrp session ..." for the state and the session.
func parseStat(b []byte) (byte, int, bool) {
	f := StatFields(b)
	if len(f) < 4 {
		return 0, 0, false
	}
	sid, err := strconv.Atoi(f[3])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], sid, true
}

// StatFields returns the fields of a /proc/PID/stat line that follow the command name, the
// process's state (field 3 of the line) first, or nil for a line that is not one. The name
// may hold spaces and parentheses itself: the fields are those after the last ')'.
func StatFields(line []byte) []string {
	s := string(line)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	f := strings.Fields(s[i+1:])
	if len(f) == 0 || len(f[0]) != 1 {
		return nil
	}
	return f
}
