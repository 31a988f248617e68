package eventlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/hiloop/hiloop/internal/units"
	"github.com/hiloop/hiloop/pkg/api"
)

// Limits bound how much of the log one session and one sandbox may fill; 0 is no limit. An
// append of a limited type (a prompt, an update, a permission request: what a harness or a user
// makes) that would go past a limit is refused with a *FullError. The events that end a turn
// (notice, error, permission_resolved, turn_end) are always stored: they are the daemon's, a few
// per turn, and a full session starts no turn, so they cannot fill a disk.
type Limits struct {
	SessionEvents int64
	SessionBytes  int64
	SandboxEvents int64
	SandboxBytes  int64
}

// DefaultLimits are the limits of a daemon that sets none: far above a long working session
// (a 10,000-update turn of short chunks stores under 2 MiB), far below a disk.
var DefaultLimits = Limits{
	SessionEvents: 1_000_000,
	SessionBytes:  256 << 20,
	SandboxEvents: 4_000_000,
	SandboxBytes:  1 << 30,
}

// ErrFull matches (errors.Is) every *FullError.
var ErrFull = errors.New("session event log is full")

// FullError is a refused append: the session's or its sandbox's log is at its limit.
type FullError struct {
	Session string
	Sandbox string // "" when the session's own limit was hit
	What    string // "events" or "bytes"
	Used    int64
	Limit   int64
}

func (e *FullError) Error() string {
	if e.Sandbox != "" {
		return fmt.Sprintf("the event logs of sandbox %s's sessions are full (%s)", e.Sandbox, e.Measure())
	}
	return fmt.Sprintf("the event log of session %s is full (%s)", e.Session, e.Measure())
}

// Measure says how much was used of which limit, e.g. "256 MiB stored, the limit is 256 MiB".
func (e *FullError) Measure() string {
	used, limit := fmt.Sprintf("%d events", e.Used), fmt.Sprintf("%d events", e.Limit)
	if e.What == "bytes" {
		used, limit = units.Bytes(e.Used), units.Bytes(e.Limit)
	}
	return used + " stored, the limit is " + limit
}

// Is makes errors.Is(err, ErrFull) true.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// limited says which events count against the limits.
func limited(typ api.EventType) bool {
	switch typ {
	case api.EventPrompt, api.EventUpdate, api.EventPermission:
		return true
	}
	return false
}

// Usage is what a session's events take in the log.
type Usage struct {
	Events int64
	Bytes  int64 // of the events' stored JSON
}

// usage is a session's Usage and the sandbox it counts against.
type usage struct {
	Usage
	sandbox string
}

func (u usage) encode() []byte {
	v := make([]byte, 16, 16+len(u.sandbox))
	binary.BigEndian.PutUint64(v, uint64(u.Events))
	binary.BigEndian.PutUint64(v[8:], uint64(u.Bytes))
	return append(v, u.sandbox...)
}

func decodeUsage(v []byte) (usage, bool) {
	if len(v) < 16 {
		return usage{}, false
	}
	return usage{
		Usage:   Usage{Events: int64(binary.BigEndian.Uint64(v)), Bytes: int64(binary.BigEndian.Uint64(v[8:]))},
		sandbox: string(v[16:]),
	}, true
}

// loadUsage reads every session's usage into l.usage and l.sandboxes. A session with events but
// no usage record (its events were stored before there were limits) is counted once, here, and
// its record written.
func (l *Log) loadUsage() error {
	return l.db.Update(func(tx *bolt.Tx) error {
		root, recs := tx.Bucket(bucketEvents), tx.Bucket(bucketUsage)
		return root.ForEachBucket(func(k []byte) error {
			id := string(k)
			u, ok := decodeUsage(recs.Get(k))
			if !ok {
				u = usage{sandbox: l.sandboxOf(id)}
				err := root.Bucket(k).ForEach(func(_, v []byte) error {
					u.Events++
					u.Bytes += int64(len(v))
					return nil
				})
				if err != nil {
					return err
				}
				if err := recs.Put(k, u.encode()); err != nil {
					return err
				}
			}
			l.usage[id] = u
			l.addSandbox(u.sandbox, u.Usage, 1)
			return nil
		})
	})
}

func (l *Log) sandboxOf(session string) string {
	if l.cfg.SandboxOf == nil {
		return ""
	}
	return l.cfg.SandboxOf(session)
}

// addSandbox adds sign times u to the sandbox's total; l.mu must be held, or the log not yet
// running.
func (l *Log) addSandbox(sandbox string, u Usage, sign int64) {
	if sandbox == "" {
		return
	}
	t := l.sandboxes[sandbox]
	t.Events += sign * u.Events
	t.Bytes += sign * u.Bytes
	if t.Events <= 0 && t.Bytes <= 0 {
		delete(l.sandboxes, sandbox)
		return
	}
	l.sandboxes[sandbox] = t
}

// admit checks one more event of size bytes for a session that uses u, its sandbox using
// sandbox: nil if it fits every limit.
func (l *Log) admit(session string, u usage, sandbox Usage, size int64) *FullError {
	lim := l.cfg.Limits
	switch {
	case lim.SessionEvents > 0 && u.Events+1 > lim.SessionEvents:
		return &FullError{Session: session, What: "events", Used: u.Events, Limit: lim.SessionEvents}
	case lim.SessionBytes > 0 && u.Bytes+size > lim.SessionBytes:
		return &FullError{Session: session, What: "bytes", Used: u.Bytes, Limit: lim.SessionBytes}
	case u.sandbox == "":
		return nil
	case lim.SandboxEvents > 0 && sandbox.Events+1 > lim.SandboxEvents:
		return &FullError{Session: session, Sandbox: u.sandbox, What: "events", Used: sandbox.Events, Limit: lim.SandboxEvents}
	case lim.SandboxBytes > 0 && sandbox.Bytes+size > lim.SandboxBytes:
		return &FullError{Session: session, Sandbox: u.sandbox, What: "bytes", Used: sandbox.Bytes, Limit: lim.SandboxBytes}
	}
	return nil
}

// Usage returns what session's events take in the log.
func (l *Log) Usage(session string) Usage {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.usage[session].Usage
}

// Room returns a *FullError when session (or its sandbox) is so close to its limits that a
// prompt of promptBytes could not be stored, nil otherwise: a prompt is refused before its turn
// starts rather than after.
func (l *Log) Room(session string, promptBytes int) error {
	l.mu.Lock()
	u, ok := l.usage[session]
	l.mu.Unlock()
	if !ok {
		u.sandbox = l.sandboxOf(session)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// The prompt's own bytes and its envelope, and room for at least one update after it.
	if err := l.admit(session, u, l.sandboxes[u.sandbox], int64(promptBytes)+2*eventEnvelope); err != nil {
		return err
	}
	return nil
}

// eventEnvelope is about what an event's JSON takes besides its data: seq, type and time.
const eventEnvelope = 80

// OnFull sets fn to be called, on a goroutine of its own, the first time an append to a session
// is refused for a limit since the session last had room: the session service ends the turn
// and says why.
func (l *Log) OnFull(fn func(session string, err *FullError)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onFull = fn
}
