package daemon

import (
	"container/list"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"
)

// The API listeners' timeouts. A request's headers must arrive within apiHeaderTimeout and its
// body within apiBodyTimeout; a keep-alive connection idle for apiIdleTimeout is closed.
// Streams (exec, session events) are hijacked WebSockets with keepalives of their own, which
// none of these cut.
const (
	apiHeaderTimeout = 10 * time.Second
	apiIdleTimeout   = 60 * time.Second
)

// apiBodyTimeout is a variable for the tests' sake.
var apiBodyTimeout = 30 * time.Second

// apiConnLimits returns how many connections the unix socket and the TCP listener each hold at
// most: an eighth and a sixteenth of the descriptor limit (the gateway's budget takes half), at
// most 4096 and 1024.
func apiConnLimits() (unix, tcp int) {
	n := fileLimit()
	return int(min(n/8, 4096)), int(min(n/16, 1024))
}

// connLimiter bounds a listener's connections. At the bound, a new connection takes the place
// of the one idle the longest (a keep-alive connection between requests, or one that has not
// sent a request yet), so that a flood of idle connections cannot lock an operator out; only
// when every connection is busy is the new one closed at once. Connections an HTTP server
// hijacks (streams) count until they are closed, and are never the ones given up.
type connLimiter struct {
	net.Listener
	max int

	mu    sync.Mutex
	n     int                        // connections open
	idle  *list.List                 // of *limitedConn, idle the longest first
	where map[net.Conn]*list.Element // idle connections' places in idle
	peak  int                        // the most open since memory was last given back
	freed time.Time                  // when memory was last given back
}

func newConnLimiter(ln net.Listener, max int) *connLimiter {
	return &connLimiter{Listener: ln, max: max, idle: list.New(), where: map[net.Conn]*list.Element{}}
}

// Accept returns the next connection, making room for it as the type says.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l}
		l.mu.Lock()
		var victim net.Conn
		if l.n >= l.max {
			if e := l.idle.Front(); e != nil {
				victim = e.Value.(net.Conn)
				l.idle.Remove(e)
				delete(l.where, victim)
			}
		}
		admit := l.n < l.max || victim != nil
		if admit {
			l.n++
			l.peak = max(l.peak, l.n)
			// New until it sends a request: as good as idle.
			l.where[lc] = l.idle.PushBack(lc)
		}
		l.mu.Unlock()
		if victim != nil {
			victim.Close()
		}
		if admit {
			return lc, nil
		}
		c.Close()
	}
}

// connState is the http.Server's ConnState hook: it keeps track of which connections are idle.
func (l *connLimiter) connState(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, listed := l.where[c]
	switch s {
	case http.StateIdle:
		if !listed {
			l.where[c] = l.idle.PushBack(c)
		}
	case http.StateActive, http.StateHijacked, http.StateClosed:
		if listed {
			l.idle.Remove(e)
			delete(l.where, c)
		}
	}
}

// closed forgets a connection that closed, and gives memory back to the system once the
// connections of a flood are gone (the runtime would keep their buffers for minutes).
func (l *connLimiter) closed(c net.Conn) {
	l.mu.Lock()
	if e, ok := l.where[c]; ok {
		l.idle.Remove(e)
		delete(l.where, c)
	}
	l.n--
	giveBack := l.peak >= 1000 && l.n < l.peak/4 && time.Since(l.freed) > 10*time.Second
	if giveBack {
		l.peak, l.freed = l.n, time.Now()
	}
	l.mu.Unlock()
	if giveBack {
		go debug.FreeOSMemory()
	}
}

// limitedConn tells its limiter when it closes, once.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	once sync.Once
}

// NetConn returns the connection it wraps, for copies that splice between sockets.
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.closed(c) })
	return err
}

// bodyDeadline gives a request apiBodyTimeout to deliver its body, so that a body trickled in
// after its headers cannot hold a connection forever, and returns the function that lifts the
// deadline once the body is read.
func bodyDeadline(w http.ResponseWriter) (lift func()) {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(apiBodyTimeout)) != nil {
		return func() {}
	}
	return func() { _ = rc.SetReadDeadline(time.Time{}) }
}
