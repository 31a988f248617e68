// Package sshd is the daemon's managed SSH endpoint: one listener where the user name picks the
// sandbox. It serves shells and exec requests (with or without a PTY), the sftp subsystem, and
// direct-tcpip forwards into the sandbox's own loopback. Auth is by public key only.
//
// A key belongs to one user, and reaches that user's sandboxes only: the SSH user name NAME is
// the sandbox identity.Key(owner, NAME). An admin's key may also name USER.NAME, another user's
// sandbox; anyone else's key naming another user's sandbox is refused exactly as a sandbox that
// does not exist.
//
// It owns the listener, the host key file and the SSH connections. It must not touch sandboxes'
// lifecycle or the key registry: it asks Sandboxes and Keys, and the daemon calls CloseSandbox
// when a sandbox stops and CloseUser when a user loses access.
package sshd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	glider "github.com/gliderlabs/ssh"
	gossh "golang.org/x/crypto/ssh"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/pkg/api"
)

// Sandboxes is what the server needs of the sandbox manager.
type Sandboxes interface {
	// Exists reports whether a sandbox of that name exists (running or not).
	Exists(name string) bool
	// Exec starts a process in the named running sandbox; an error for a stopped sandbox is an
	// *api.Error with code sandbox_not_running.
	Exec(ctx context.Context, name string, spec runtime.ExecSpec) (runtime.Process, error)
	// DialLoopback dials addr (127.0.0.1:PORT, [::1]:PORT or localhost:PORT) inside the named
	// running sandbox.
	DialLoopback(ctx context.Context, name, addr string) (net.Conn, error)
}

// Keys says whose each public key is.
type Keys interface {
	// Owner returns the user who registered key (with whether they are an admin); ok is false
	// for a key nobody registered, which may not log in.
	Owner(key gossh.PublicKey) (owner identity.Principal, ok bool)
}

// Config configures a Server.
type Config struct {
	// Listen is the TCP address to listen on, e.g. 127.0.0.1:2222.
	Listen string
	// HostKeyPath is the ed25519 host key, generated (mode 0600) if missing, and kept.
	HostKeyPath string
	Sandboxes   Sandboxes
	Keys        Keys
	// Log receives one line per login and per failure; nil discards.
	Log *slog.Logger
}

// handshakeTimeout bounds key exchange plus authentication; an idle logged-in connection
// (ssh -N -L) may stay as long as it likes. A variable for the tests.
var handshakeTimeout = 30 * time.Second

// Server is the SSH endpoint. Create it with New, run it with Serve.
type Server struct {
	cfg    Config
	log    *slog.Logger
	ln     net.Listener
	signer gossh.Signer
	ssh    *glider.Server

	mu     sync.Mutex
	closed bool
	conns  map[*conn]struct{}
	wg     sync.WaitGroup // connections and every goroutine serving them
}

// conn is one accepted TCP connection.
type conn struct {
	raw      net.Conn
	sandbox  string      // the sandbox's key, once authenticated; guarded by Server.mu
	user     string      // the owner of the key it authenticated with; guarded by Server.mu
	loggedIn atomic.Bool // authenticated: the handshake's deadline and quick ACKs are over
}

// permSandbox carries, in the permissions of an authenticated connection, the key of the
// sandbox its SSH user name resolved to.
const permSandbox = "hiloop-sandbox"

// sandboxOf is the key of the sandbox an authenticated connection reaches.
func sandboxOf(c *gossh.ServerConn) string { return c.Permissions.Extensions[permSandbox] }

type connKey struct{}

// New loads (or creates) the host key and starts listening; connections are served by Serve.
func New(cfg Config) (*Server, error) {
	if cfg.Sandboxes == nil || cfg.Keys == nil {
		return nil, errors.New("sshd: Sandboxes and Keys are required")
	}
	if cfg.HostKeyPath == "" {
		return nil, errors.New("sshd: HostKeyPath is required")
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	signer, err := loadOrCreateHostKey(cfg.HostKeyPath, log)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("sshd: %w", err)
	}
	s := &Server{cfg: cfg, log: log, ln: ln, signer: signer, conns: map[*conn]struct{}{}}
	s.ssh = &glider.Server{
		Version:              "hiloop",
		HostSigners:          []glider.Signer{signer},
		PublicKeyHandler:     s.authorize,
		ConnCallback:         s.connCallback,
		ServerConfigCallback: s.serverConfig,
		// No RequestHandlers: tcpip-forward (ssh -R) and every other global request is refused.
		// No agent or X11 forwarding either: the session handler refuses those requests.
		ChannelHandlers: map[string]glider.ChannelHandler{
			"session":      s.handleSession,
			"direct-tcpip": s.handleDirectTCPIP,
		},
	}
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// HostKey is the server's public host key, for clients to pin.
func (s *Server) HostKey() gossh.PublicKey { return s.signer.PublicKey() }

// Serve accepts connections until ctx ends, then closes the listener and every connection
// (killing the processes their sessions run) and returns nil once all of them are gone. A
// Server serves once; Serve with a cancelled ctx just releases the listener.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, s.shutdown)
	defer stop()
	var backoff time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.isClosed() {
				break
			}
			// Out of file descriptors and the like: wait and retry, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("ssh accept", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			continue
		}
		backoff = 0
		s.serveConn(c)
	}
	s.shutdown()
	s.wg.Wait()
	return nil
}

func (s *Server) serveConn(raw net.Conn) {
	c := &conn{raw: raw}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		raw.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	_ = raw.SetDeadline(time.Now().Add(handshakeTimeout))
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
		s.ssh.HandleConn(&trackedConn{Conn: raw, c: c})
	}()
}

// trackedConn carries its conn record through gliderlabs to connCallback.
type trackedConn struct {
	net.Conn
	c *conn
}

// SetDeadline ignores gliderlabs, which resets the deadline around every read and write (to
// none, without its idle timeouts) and would lift the handshake timeout; the server sets
// deadlines on the raw conn.
func (*trackedConn) SetDeadline(time.Time) error { return nil }

// Read acknowledges at once what it reads until the login is done. OpenSSH's client sends
// with Nagle on during the handshake, and its small messages after KEXINIT and NEWKEYS waited
// for this side's delayed ACK, 40 ms each: `ssh NAME true` took 72 ms without, 15 ms with.
func (t *trackedConn) Read(b []byte) (int, error) {
	if !t.c.loggedIn.Load() {
		quickAck(t.Conn)
	}
	return t.Conn.Read(b)
}

// connCallback remembers which conn a gliderlabs context belongs to.
func (s *Server) connCallback(ctx glider.Context, nc net.Conn) net.Conn {
	if t, ok := nc.(*trackedConn); ok {
		ctx.SetValue(connKey{}, t.c)
	}
	return nc
}

// ciphers are AES-GCM only. The OpenSSH client takes the first of its own preferences the server
// offers; it prefers chacha20-poly1305, which x/crypto computes without assembly at about 60%
// of OpenSSH's throughput, while AES-GCM runs on AES-NI close to OpenSSH's own. Every OpenSSH
// since 6.2 and current PuTTY speak AES-GCM.
var ciphers = []string{"aes128-gcm@openssh.com", "aes256-gcm@openssh.com"}

func (s *Server) serverConfig(ctx glider.Context) *gossh.ServerConfig {
	return &gossh.ServerConfig{
		Config: gossh.Config{Ciphers: ciphers},
		VerifiedPublicKeyCallback: func(md gossh.ConnMetadata, key gossh.PublicKey, perms *gossh.Permissions, _ string) (*gossh.Permissions, error) {
			return s.verified(ctx, md, key, perms)
		},
		AuthLogCallback: func(md gossh.ConnMetadata, method string, err error) {
			if err != nil {
				if method != "none" {
					s.log.Debug("ssh login refused", "user", md.User(), "remote", md.RemoteAddr().String(), "method", method)
				}
				return
			}
			c, _ := ctx.Value(connKey{}).(*conn)
			if c == nil {
				return
			}
			c.loggedIn.Store(true)
			_ = c.raw.SetDeadline(time.Time{})
			s.mu.Lock()
			args := []any{"sandbox", c.sandbox, "owner", c.user, "remote", md.RemoteAddr().String()}
			s.mu.Unlock()
			if key, ok := ctx.Value(glider.ContextKeyPublicKey).(gossh.PublicKey); ok {
				args = append(args, "key", gossh.FingerprintSHA256(key))
			}
			s.log.Info("ssh login", args...)
		},
	}
}

// authorize accepts a registered key whatever the user name. SSH lets a client ask whether a key
// would do without proving it holds the private half; an answer that depended on the sandbox
// would let anyone with a published public key probe for sandbox names. The sandbox is checked
// in verified, once the signature is good, and refused there like a wrong key.
func (s *Server) authorize(_ glider.Context, key glider.PublicKey) bool {
	_, ok := s.cfg.Keys.Owner(key)
	return ok
}

// errNoSandbox refuses a proven key for a sandbox it cannot reach, as an authentication
// failure: the client cannot tell a sandbox of another user from one that does not exist.
var errNoSandbox = errors.New("no such sandbox")

// verified resolves the SSH user name to the sandbox the proven key reaches, and refuses the
// login when there is none. It remembers the sandbox and the key's owner on the connection, for
// its channels, CloseSandbox and CloseUser.
func (s *Server) verified(ctx glider.Context, md gossh.ConnMetadata, key gossh.PublicKey, perms *gossh.Permissions) (*gossh.Permissions, error) {
	owner, ok := s.cfg.Keys.Owner(key)
	if !ok {
		return nil, errNoSandbox // removed since authorize
	}
	sandbox, ok := Resolve(owner, md.User())
	if !ok || !s.cfg.Sandboxes.Exists(sandbox) {
		return nil, errNoSandbox
	}
	if c, _ := ctx.Value(connKey{}).(*conn); c != nil {
		s.mu.Lock()
		c.sandbox, c.user = sandbox, owner.User
		s.mu.Unlock()
	}
	if perms == nil {
		perms = &gossh.Permissions{}
	}
	if perms.Extensions == nil {
		perms.Extensions = map[string]string{}
	}
	perms.Extensions[permSandbox] = sandbox
	return perms, nil
}

// Resolve is the key of the sandbox the SSH user name names for a key of owner: NAME is the
// owner's sandbox NAME; USER.NAME is USER's sandbox NAME, which only an admin's key (or USER's
// own) reaches. ok is false for a name the key may not reach or that is no sandbox name.
func Resolve(owner identity.Principal, user string) (sandbox string, ok bool) {
	ns, name, qualified := strings.Cut(user, ".")
	if !qualified {
		ns, name = owner.User, user
	}
	if api.ValidateName("sandbox", name) != nil || (qualified && api.ValidateName("user", ns) != nil) {
		return "", false
	}
	if ns != owner.User && !owner.Admin {
		return "", false
	}
	return identity.Key(ns, name), true
}

// CloseSandbox ends every session and forward of the sandbox whose key is name by closing the
// connections logged in to it; their processes are killed. The daemon calls it after a stop or
// a delete.
func (s *Server) CloseSandbox(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.sandbox == name {
			c.raw.Close()
		}
	}
}

// CloseUser ends every session and port forward of the connections that logged in with a key
// of user, whichever sandbox they reach, by closing them; their processes are killed. The
// daemon calls it when the user is removed or loses access; the user's keys must be gone from
// Keys first, so no new login follows.
func (s *Server) CloseUser(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.user == user {
			c.raw.Close()
		}
	}
}

func (s *Server) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.ln.Close()
	for c := range s.conns {
		c.raw.Close()
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// enter counts a goroutine serving a connection into the WaitGroup Serve waits for; false
// once the server is shutting down. It must be called by a goroutine already counted (or
// before shutdown), so an Add never races with the final Wait.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// goTracked runs f on a goroutine Serve waits for.
func (s *Server) goTracked(f func()) {
	s.wg.Add(1) // the caller is tracked: the counter is above zero
	go func() {
		defer s.wg.Done()
		f()
	}()
}
