package gateway

import (
	"fmt"
	"math"
	"net"
	"sync"
)

// The daemon-wide connection budget (sandboxd --gateway-max-conns).
const (
	// ConnFDs is how many file descriptors one connection of the gateway may hold: its two
	// sockets and, while bytes move, a splice pipe (two descriptors) each way, which a copy
	// keeps while its receiver is too slow to take them. An idle tunnel holds only its sockets
	// (it waits for bytes without a pipe: waitQueued; TestConnFDs counts them), but the budget
	// counts a busy one, so that descriptors cannot run out however the connections behave.
	ConnFDs = 6
	// DefaultConnReserve is how many connections every attached sandbox is sure of however busy
	// the others are: a harness's model streams and a package manager's parallel downloads (npm
	// opens up to 15 per registry, pip and apt fewer) fit in it many times over.
	DefaultConnReserve = 64
	// MaxDefaultBudget caps DefaultBudget whatever the descriptor limit: at about 15.6 KiB of
	// sandboxd's memory per idle connection (docs/performance.md) it is about 1 GiB.
	MaxDefaultBudget = 65536
	// MinDaemonFDs is the least number of descriptors the daemon keeps for everything but the
	// gateway's connections (its API, SSH, bbolt, the sandboxes' runtime, the resolvers)
	// however the budget is set.
	MinDaemonFDs = 1024
)

// DefaultBudget is the budget of a daemon that may hold nofile descriptors (RLIMIT_NOFILE): as
// many connections as half of them carry at ConnFDs each, at most MaxDefaultBudget. The other
// half stays for the daemon's API, SSH and the sandboxes' runtime and resolvers (each
// sandbox's resolver alone may hold about 150: 16 TCP connections, 64 lookups in flight).
func DefaultBudget(nofile uint64) int {
	return int(min(nofile/2/ConnFDs, MaxDefaultBudget))
}

// MaxBudget is the largest budget a daemon that may hold nofile descriptors can afford:
// ConnFDs a connection, MinDaemonFDs kept; never less than DefaultBudget, which is what a
// daemon with few descriptors gets.
func MaxBudget(nofile uint64) int {
	if nofile <= MinDaemonFDs {
		return DefaultBudget(nofile)
	}
	return max(DefaultBudget(nofile), int(min((nofile-MinDaemonFDs)/ConnFDs, math.MaxInt32)))
}

// Budget bounds the gateway's connections of every sandbox together (Proxy.Budget: one Budget
// is shared by the proxies of all sandboxes), so that no sandbox takes the descriptors and
// memory the others and the daemon need:
//
//   - a sandbox holds at most its own Proxy.MaxConns, and at most half of Max, so one busy
//     sandbox never fills the budget alone;
//   - every sandbox is sure of its first Reserve connections: when the budget is full, such a
//     connection takes the place of the newest connection of the sandbox that holds the most
//     beyond its own reserve, which is reset;
//   - any other connection while the budget is full is reset.
//
// A connection refused or reset is audited with the limit that did it.
type Budget struct {
	Max     int // connections of all sandboxes together; 0: no bound but each sandbox's own
	Reserve int // connections every sandbox is sure of; 0: DefaultConnReserve

	mu       sync.Mutex
	held     int // admitted, those being reset to make room included
	shedding int // admitted, being reset to make room for another sandbox's
	seq      uint64
	shares   map[*share]struct{} // the proxies serving
}

// share is one Proxy's part of a Budget.
type share struct {
	b        *Budget
	max      int // the sandbox's own cap
	held     int
	shedding int
	slots    map[*slot]struct{}
}

// slot is one admitted connection's place in the budget.
type slot struct {
	sh   *share
	c    net.Conn
	seq  uint64 // admission order: the newest is the one reset to make room
	shed bool   // reset to make room for another sandbox's reserved connection
}

func (b *Budget) reserve() int { return orDefault(b.Reserve, DefaultConnReserve) }

// join gives a Proxy whose own cap is maxConns its share of b.
func (b *Budget) join(maxConns int) *share {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shares == nil {
		b.shares = map[*share]struct{}{}
	}
	sh := &share{b: b, max: maxConns, slots: map[*slot]struct{}{}}
	if b.Max > 0 {
		sh.max = min(sh.max, max(b.Max/2, 1))
	}
	b.shares[sh] = struct{}{}
	return sh
}

// leave takes a closed Proxy's share out of the choice of whom to reset; its connections still
// count until they end.
func (sh *share) leave() {
	sh.b.mu.Lock()
	delete(sh.b.shares, sh)
	sh.b.mu.Unlock()
}

// take admits c, or says which limit refuses it. Admitting a connection within its sandbox's
// reserve while the budget is full resets another sandbox's newest connection.
func (sh *share) take(c net.Conn) (*slot, error) {
	b := sh.b
	b.mu.Lock()
	if sh.held >= sh.max {
		b.mu.Unlock()
		return nil, fmt.Errorf("too many connections from this sandbox (limit %d)", sh.max)
	}
	var victim *slot
	if b.Max > 0 && b.held-b.shedding >= b.Max {
		if sh.held-sh.shedding < b.reserve() {
			victim = b.victim()
		}
		if victim == nil {
			b.mu.Unlock()
			return nil, fmt.Errorf("too many gateway connections on this daemon (limit %d, sandboxd --gateway-max-conns)", b.Max)
		}
		victim.shed = true
		victim.sh.shedding++
		b.shedding++
	}
	b.seq++
	s := &slot{sh: sh, c: c, seq: b.seq}
	sh.slots[s] = struct{}{}
	sh.held++
	b.held++
	b.mu.Unlock()
	if victim != nil {
		reset(victim.c)
	}
	return s, nil
}

// victim is the newest connection not being reset of the sandbox that holds the most beyond
// its reserve; nil when every sandbox is within its reserve.
func (b *Budget) victim() *slot {
	var big *share
	for sh := range b.shares {
		if n := sh.held - sh.shedding; n > b.reserve() && (big == nil || n > big.held-big.shedding) {
			big = sh
		}
	}
	if big == nil {
		return nil
	}
	var newest *slot
	for s := range big.slots {
		if !s.shed && (newest == nil || s.seq > newest.seq) {
			newest = s
		}
	}
	return newest
}

// release gives the slot back when its connection has ended. It returns why the connection
// was reset when the budget reset it, else "".
func (s *slot) release() string {
	b := s.sh.b
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(s.sh.slots, s)
	s.sh.held--
	b.held--
	if !s.shed {
		return ""
	}
	s.sh.shedding--
	b.shedding--
	return fmt.Sprintf("reset to make room for another sandbox's connection: the daemon's gateway connections are at their limit (%d, sandboxd --gateway-max-conns) and this sandbox held the most", b.Max)
}

// extra admits c, an upstream connection beyond the one its client's connection was admitted
// with, as a connection of its own: it holds its place until it is closed. When the budget
// resets it to make room, shed is told why. A refused c is closed.
func (sh *share) extra(c net.Conn, shed func(why string)) (net.Conn, error) {
	s, err := sh.take(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &extraConn{Conn: c, s: s, shed: shed}, nil
}

// extraConn is an upstream connection admitted by share.extra.
type extraConn struct {
	net.Conn
	s    *slot
	shed func(why string)
	once sync.Once
}

func (c *extraConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if why := c.s.release(); why != "" {
			c.shed(why)
		}
	})
	return err
}
