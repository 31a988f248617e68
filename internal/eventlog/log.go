// Package eventlog owns the durable, sequenced event log of every session: it stores events (the
// API's api.SessionEvent, encoded as the API sends them) in a bbolt file of its own beside the
// daemon's (<data>/events.db), streams them to watchers, holds each session and sandbox to its
// Limits, and gives the space of deleted sessions back by compacting that file online. It knows
// nothing of ACP, harnesses or HTTP. The daemon's own file (sandboxd.db) it touches only in
// Migrate, once, to move the event buckets an older daemon kept there into events.db.
//
// internal/session (the session service) is its only writer and decides which sessions exist.
package eventlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/hiloop/hiloop/internal/seqlog"
	"github.com/hiloop/hiloop/pkg/api"
)

var (
	bucketEvents = []byte("events")      // session id → nested bucket: big-endian seq → api.SessionEvent JSON
	bucketCalls  = []byte("event_calls") // session id → the session's last call: call, NUL, big-endian seq
	bucketUsage  = []byte("event_usage") // session id → usage.encode(): its events, bytes and sandbox
)

const (
	// maxBatch bounds how many appends share one transaction and fsync.
	maxBatch = 4096
	// subscriberBuffer is how many live events a watcher may fall behind before it is cut off:
	// enough for a harness's burst of a few thousand updates.
	subscriberBuffer = 4096
	// replayPage is how many stored events a subscription reads per transaction while catching up.
	replayPage = 1024
)

// ErrSlow ends a subscription whose watcher fell behind its buffer; it must reconnect from the
// last seq it received.
var ErrSlow = errors.New("session event watcher fell behind; reconnect from the last seq received")

// ErrClosed is returned by Append, and ends subscriptions, once the log is closed.
var ErrClosed = errors.New("session event log is closed")

// ErrDeleted ends the subscriptions of a session whose events were deleted.
var ErrDeleted = errors.New("session was deleted")

// ErrUnknownType is returned by Append for an event type outside api.EventTypes.
var ErrUnknownType = errors.New("unknown event type")

// Config is how the daemon runs the log.
type Config struct {
	// Limits bound each session's and each sandbox's events.
	Limits Limits
	// SandboxOf returns the sandbox (its id) a session belongs to, "" for none; it is asked once
	// per session, at its first append, and must not call the log.
	SandboxOf func(session string) string
	// CompactMin is how much dead space (bytes in free pages) deletes must leave, besides half
	// the file, before the file is compacted; 0 is DefaultCompactMin.
	CompactMin int64
	// Logger tells of compactions; nil is slog's default.
	Logger *slog.Logger

	noSync bool // tests: no fsync
}

// Log is the durable event log of all sessions. One writer goroutine assigns sequence numbers and
// group-commits queued appends, so a chatty producer pays for one fsync per batch, not per event.
type Log struct {
	cfg  Config
	path string
	reqs chan *appendReq // buffered: a producer queues while the writer fsyncs the previous batch
	quit chan struct{}   // closed by Close once no producer can queue any more
	done chan struct{}   // closed when the writer has exited

	// db is swapped by a compaction, under dbMu; a reader holds dbMu.RLock for one transaction
	// (view), the writer, which compacts, uses db as it is.
	dbMu sync.RWMutex
	db   *bolt.DB

	mu        sync.Mutex
	closed    bool
	producers sync.WaitGroup                        // producers between the closed check and their send
	published map[string]uint64                     // session → highest seq handed to watchers
	deleted   map[string]bool                       // sessions whose events were deleted
	failed    map[string]error                      // session → first failed commit not yet taken
	subs      map[string]map[*Subscription]struct{} // session → live watchers
	// Written by the writer only, under mu: the writer reads them without it.
	usage     map[string]usage      // session → what its stored events take
	sandboxes map[string]Usage      // sandbox → what its sessions' stored events take
	full      map[string]*FullError // sessions refused an append since they last had room
	fullN     atomic.Int64          // len(full), read without mu by Enqueue
	onFull    func(session string, err *FullError)
}

type appendReq struct {
	session string
	typ     api.EventType
	data    json.RawMessage
	call    string // the API call that makes the event, if any
	del     bool   // delete the session's events instead of appending
	ev      Entry
	refused *FullError // not stored: over a limit
	err     error
	done    chan struct{}
}

// Entry is a stored event as a watcher receives it: the event, and the bytes the log stored for
// it. The bytes are encoded once, at append, and every watcher is served them as they are, so a
// hundred watchers cost no more encoding than one; they must not be modified.
type Entry struct {
	api.SessionEvent
	JSON []byte `json:"-"`
}

// Open opens the event log kept in the bbolt file at path (created if needed) and starts its
// writer. The file is the log's alone.
func Open(path string, cfg Config) (*Log, error) {
	if cfg.CompactMin <= 0 {
		cfg.CompactMin = DefaultCompactMin
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// A compaction cut short by a crash left its copy; the file itself is whole.
	if err := os.Remove(path + compactSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	db, err := openBolt(path, cfg.noSync)
	if err != nil {
		return nil, err
	}
	if err := seqlog.CreateBuckets(db.Update, "init "+path, bucketEvents, bucketCalls, bucketUsage); err != nil {
		db.Close()
		return nil, err
	}
	l := &Log{
		cfg:       cfg,
		path:      path,
		db:        db,
		reqs:      make(chan *appendReq, maxBatch),
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
		published: map[string]uint64{},
		deleted:   map[string]bool{},
		failed:    map[string]error{},
		subs:      map[string]map[*Subscription]struct{}{},
		usage:     map[string]usage{},
		sandboxes: map[string]Usage{},
		full:      map[string]*FullError{},
	}
	if err := l.loadUsage(); err != nil {
		db.Close()
		return nil, fmt.Errorf("count the events in %s: %w", path, err)
	}
	go l.write()
	return l, nil
}

// openBolt opens a bbolt file of the log's, saying so when another sandboxd holds it.
func openBolt(path string, noSync bool) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, NoSync: noSync})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open %s: the file is locked by another sandboxd using the same --data-dir", path)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}

// view runs fn in a read transaction of the current file: a compaction waits for it.
func (l *Log) view(fn func(tx *bolt.Tx) error) error {
	l.dbMu.RLock()
	defer l.dbMu.RUnlock()
	return l.db.View(fn)
}

// Close commits every append already queued, stops the writer, ends every subscription with
// ErrClosed and closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.producers.Wait() // the writer still runs, so every producer's send completes
	close(l.quit)
	<-l.done

	l.mu.Lock()
	for _, set := range l.subs {
		for s := range set {
			s.end(ErrClosed)
		}
	}
	l.mu.Unlock()
	l.dbMu.Lock()
	defer l.dbMu.Unlock()
	return l.db.Close()
}

// Append stores one event for session and returns it once it is durable. It is published to
// watchers only after that. Seq starts at 1 per session, with no holes.
func (l *Log) Append(session string, typ api.EventType, data json.RawMessage) (api.SessionEvent, error) {
	return l.Enqueue(session, typ, data).Wait()
}

// Pending is an append that was queued; Wait returns the stored event once it is durable.
type Pending struct {
	r   *appendReq
	err error
}

// Wait blocks until the event is durable (or failed) and returns it.
func (p Pending) Wait() (api.SessionEvent, error) {
	if p.err != nil {
		return api.SessionEvent{}, p.err
	}
	<-p.r.done
	return p.r.ev.SessionEvent, p.r.err
}

// Enqueue queues one event for session without waiting for it to be stored: events queued by one
// goroutine are stored, and published, in the order they were queued. It blocks only while the
// queue is full. Bad input and a closed log fail at once, in the returned Pending.
func (l *Log) Enqueue(session string, typ api.EventType, data json.RawMessage) Pending {
	return l.EnqueueCall(session, typ, data, "")
}

// EnqueueCall is Enqueue for an event that an API call makes (a prompt), call being an id of that
// call (its idempotency key and request): the log keeps it, in the event's own transaction, as
// the session's last call, so that a retry of the call after a crash finds with CallSeq that its
// event is stored rather than storing it again. "" is no call.
func (l *Log) EnqueueCall(session string, typ api.EventType, data json.RawMessage, call string) Pending {
	if len(data) > 0 && !json.Valid(data) {
		return Pending{err: fmt.Errorf("append %s event: data is not valid JSON", typ)}
	}
	return l.enqueue(session, typ, data, call)
}

// EnqueueValid is Enqueue for data the caller has just checked is valid JSON (json.Valid), as
// the session service's tap does with every update a harness sends: the log does not check
// it a second time. Data that is not valid JSON would be stored as it is and break every
// reader of the session's events.
func (l *Log) EnqueueValid(session string, typ api.EventType, data json.RawMessage) Pending {
	return l.enqueue(session, typ, data, "")
}

func (l *Log) enqueue(session string, typ api.EventType, data json.RawMessage, call string) Pending {
	if session == "" {
		return Pending{err: errors.New("append event: session id is empty")}
	}
	if !typ.Valid() {
		return Pending{err: fmt.Errorf("append event: %w %q (want one of %v)", ErrUnknownType, typ, api.EventTypes())}
	}
	if limited(typ) && l.fullN.Load() > 0 {
		l.mu.Lock()
		full := l.full[session]
		l.mu.Unlock()
		if full != nil {
			return Pending{err: full} // a flood past the limit is not even queued
		}
	}
	r := &appendReq{session: session, typ: typ, data: data, call: call, done: make(chan struct{})}
	return Pending{r: r, err: l.send(r)}
}

func (l *Log) send(r *appendReq) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.producers.Add(1)
	l.mu.Unlock()
	l.reqs <- r
	l.producers.Done()
	return nil
}

// DeleteSession removes every event of session and ends its subscriptions. Appends queued before
// it are stored first, then deleted with the rest.
func (l *Log) DeleteSession(session string) error {
	r := &appendReq{session: session, del: true, done: make(chan struct{})}
	if err := l.send(r); err != nil {
		return err
	}
	<-r.done
	return r.err
}

// write is the single writer: it takes every queued append, commits them in one transaction,
// publishes them, then answers their callers. While one batch is being fsynced the next queues up.
func (l *Log) write() {
	defer close(l.done)
	next := map[string]uint64{} // session → last seq committed, cached from the bucket
	batch := make([]*appendReq, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case r := <-l.reqs:
			batch = append(batch, r)
		case <-l.quit:
			// Close waited for every producer, so whatever is still queued is all there is.
			if len(l.reqs) == 0 {
				return
			}
			batch = append(batch, <-l.reqs)
		}
		// Callers just answered are waking up to append again; let them join this batch.
		runtime.Gosched()
	fill:
		for len(batch) < maxBatch {
			select {
			case r := <-l.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		acct := accounts{sessions: map[string]usage{}, sandboxes: map[string]Usage{}}
		err := l.commit(batch, next, &acct)
		if err != nil {
			clear(next) // the seqs handed out were not stored; reload from the bucket
			l.fail(batch, err)
			for _, r := range batch {
				r.err = fmt.Errorf("append %s event to session %s: %w", r.typ, r.session, err)
				if r.del {
					r.err = fmt.Errorf("delete events of session %s: %w", r.session, err)
				}
			}
		} else {
			l.publish(batch, &acct)
			if acct.deleted {
				l.maybeCompact()
			}
		}
		for _, r := range batch {
			if r.refused != nil {
				r.err = r.refused
			}
			close(r.done)
		}
	}
}

// accounts is what one batch changes of the usage: the sessions and sandboxes it touched, as
// they are after it. They replace l.usage's and l.sandboxes' entries once the batch is durable.
type accounts struct {
	sessions  map[string]usage
	sandboxes map[string]Usage
	deleted   bool // the batch deleted a session: its pages are free

	// The session being appended to and its sandbox's total, out of the maps until another
	// session comes (flush): a batch is mostly one session's, and this keeps the accounting off
	// the maps for each event.
	open bool
	id   string
	u    usage
	t    Usage
}

// take makes session the one being appended to and returns its usage and its sandbox's total
// to update ("" sandbox: a total nobody reads).
func (a *accounts) take(l *Log, session string) (*usage, *Usage) {
	if !a.open || a.id != session {
		a.flush()
		a.open, a.id = true, session
		a.u = a.session(l, session)
		a.t = Usage{}
		if a.u.sandbox != "" {
			a.t = a.sandbox(l, a.u.sandbox)
		}
	}
	return &a.u, &a.t
}

// flush puts the session being appended to back in the maps.
func (a *accounts) flush() {
	if !a.open {
		return
	}
	a.open = false
	a.sessions[a.id] = a.u
	if a.u.sandbox != "" {
		a.sandboxes[a.u.sandbox] = a.t
	}
}

// session returns what session uses so far in the batch; the writer reads l.usage without mu,
// as it is the only one to write it.
func (a *accounts) session(l *Log, session string) usage {
	u, ok := a.sessions[session]
	if !ok {
		if u, ok = l.usage[session]; !ok {
			u.sandbox = l.sandboxOf(session)
		}
		a.sessions[session] = u
	}
	return u
}

func (a *accounts) sandbox(l *Log, sandbox string) Usage {
	t, ok := a.sandboxes[sandbox]
	if !ok {
		t = l.sandboxes[sandbox]
		a.sandboxes[sandbox] = t
	}
	return t
}

func (l *Log) commit(batch []*appendReq, next map[string]uint64, acct *accounts) error {
	return l.db.Update(func(tx *bolt.Tx) error {
		root, calls, recs := tx.Bucket(bucketEvents), tx.Bucket(bucketCalls), tx.Bucket(bucketUsage)
		now := time.Now().UTC()
		stamp, err := now.MarshalJSON() // one time for the whole batch
		if err != nil {
			return err
		}
		for _, r := range batch {
			r.refused = nil // a batch retried after a failed commit is judged again
			if r.del {
				delete(next, r.session)
				if err := root.DeleteBucket([]byte(r.session)); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
					return err
				}
				if err := calls.Delete([]byte(r.session)); err != nil {
					return err
				}
				acct.flush()
				u := acct.session(l, r.session)
				if u.sandbox != "" {
					t := acct.sandbox(l, u.sandbox)
					t.Events -= u.Events
					t.Bytes -= u.Bytes
					acct.sandboxes[u.sandbox] = t
				}
				acct.sessions[r.session] = usage{sandbox: u.sandbox}
				acct.deleted = true
				continue
			}
			b, err := root.CreateBucketIfNotExists([]byte(r.session))
			if err != nil {
				return err
			}
			// A session's events only ever go at its end (seqs rise, and only whole sessions are
			// deleted): split its pages full, not in halves that would stay half empty.
			b.FillPercent = 1.0
			seq, ok := next[r.session]
			if !ok {
				seq = seqlog.Last(b)
			}
			seq++
			ev := api.SessionEvent{Seq: seq, Type: r.typ, Time: now, Data: r.data}
			v, err := encodeEvent(&ev, stamp)
			if err != nil {
				return err
			}
			u, t := acct.take(l, r.session)
			if limited(r.typ) {
				if r.refused = l.admit(r.session, *u, *t, int64(len(v))); r.refused != nil {
					continue
				}
			}
			next[r.session] = seq
			r.ev = Entry{SessionEvent: ev, JSON: v}
			if err := b.Put(seqlog.Key(seq), v); err != nil {
				return err
			}
			if r.call != "" {
				if err := calls.Put([]byte(r.session), append([]byte(r.call+"\x00"), seqlog.Key(seq)...)); err != nil {
					return err
				}
			}
			u.Events++
			u.Bytes += int64(len(v))
			t.Events++
			t.Bytes += int64(len(v))
		}
		acct.flush()
		for id, u := range acct.sessions {
			var err error
			if u.Events == 0 {
				err = recs.Delete([]byte(id))
			} else {
				err = recs.Put([]byte(id), u.encode())
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// CallSeq returns the seq of the event that call made in session, if call is the last call that
// made one there (EnqueueCall).
func (l *Log) CallSeq(session, call string) (uint64, bool, error) {
	if call == "" {
		return 0, false, nil
	}
	var seq uint64
	var found bool
	err := l.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketCalls).Get([]byte(session))
		if c, s, ok := bytes.Cut(v, []byte{0}); ok && string(c) == call && len(s) == 8 {
			seq, found = seqlog.Seq(s), true
		}
		return nil
	})
	return seq, found, err
}

// fail remembers, per session, the first commit that failed, for TakeFailure.
func (l *Log) fail(batch []*appendReq, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range batch {
		if l.failed[r.session] == nil {
			l.failed[r.session] = err
		}
	}
}

// TakeFailure returns, and forgets, the first error that kept an event of session from being
// stored since the last call: a producer that queues without waiting learns of it here.
func (l *Log) TakeFailure(session string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.failed[session]
	delete(l.failed, session)
	return err
}

// Sessions lists the sessions that have stored events.
func (l *Log) Sessions() ([]string, error) {
	var out []string
	err := l.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEvents).ForEachBucket(func(k []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}

// publish hands committed events to live watchers and takes the batch's accounts. It never
// blocks: a watcher whose buffer is full is cut off with ErrSlow.
func (l *Log) publish(batch []*appendReq, acct *accounts) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, u := range acct.sessions {
		if u.Events == 0 {
			delete(l.usage, id)
		} else {
			l.usage[id] = u
		}
	}
	for sb, t := range acct.sandboxes {
		if t.Events <= 0 && t.Bytes <= 0 {
			delete(l.sandboxes, sb)
		} else {
			l.sandboxes[sb] = t
		}
	}
	if acct.deleted {
		clear(l.full) // room was made; whoever is still over finds out at its next append
	}
	defer func() { l.fullN.Store(int64(len(l.full))) }()
	for _, r := range batch {
		if r.refused != nil {
			if l.full[r.session] == nil {
				l.full[r.session] = r.refused
				if fn := l.onFull; fn != nil {
					go fn(r.session, r.refused)
				}
			}
			continue
		}
		if r.del {
			delete(l.published, r.session)
			l.deleted[r.session] = true
			for s := range l.subs[r.session] {
				s.end(ErrDeleted)
			}
			continue
		}
		l.published[r.session] = r.ev.Seq
		for s := range l.subs[r.session] {
			if r.ev.Seq <= s.cursor {
				continue // already read from the store while catching up
			}
			select {
			case s.c <- r.ev:
				s.cursor = r.ev.Seq
			default:
				s.end(ErrSlow)
			}
		}
	}
}

// Since returns up to limit stored events of session with Seq > after, in order. A limit of 0 or
// less means no limit. An unknown session has no events.
func (l *Log) Since(session string, after uint64, limit int) ([]api.SessionEvent, error) {
	var out []api.SessionEvent
	err := l.read(session, after, limit, func(ev api.SessionEvent, _ []byte) {
		out = append(out, ev)
	})
	return out, err
}

// entries is Since with each event's stored bytes, copied out of the transaction.
func (l *Log) entries(session string, after uint64, limit int) ([]Entry, error) {
	var out []Entry
	err := l.read(session, after, limit, func(ev api.SessionEvent, v []byte) {
		out = append(out, Entry{SessionEvent: ev, JSON: bytes.Clone(v)})
	})
	return out, err
}

// AppendStored appends to dst the stored JSON of up to limit events of session with Seq > after,
// in order and separated by commas (the elements of a JSON array), exactly as they were encoded
// at append and as a Subscription delivers them. Nothing is decoded: serving a page of history
// this way costs a copy, not a decode and an encode per event. It stops before an event that
// would take what it appends past maxBytes (0: no such limit), but always appends the first
// one, whatever its size, so that a reader paging by seq moves on. It returns the extended
// buffer and the number of events appended.
func (l *Log) AppendStored(dst []byte, session string, after uint64, limit, maxBytes int) ([]byte, int, error) {
	n, start := 0, len(dst)
	err := l.scan(session, after, limit, func(_, v []byte) error {
		if n > 0 && maxBytes > 0 && len(dst)-start+1+len(v) > maxBytes {
			return errPageFull
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, v...)
		n++
		return nil
	})
	if errors.Is(err, errPageFull) {
		err = nil
	}
	return dst, n, err
}

// errPageFull stops AppendStored's scan.
var errPageFull = errors.New("page full")

// read calls fn with up to limit stored events of session after seq after, in order; the bytes
// fn gets live only as long as the call.
func (l *Log) read(session string, after uint64, limit int, fn func(ev api.SessionEvent, stored []byte)) error {
	return l.scan(session, after, limit, func(k, v []byte) error {
		var ev api.SessionEvent // Unmarshal copies Data: v lives only as long as the transaction
		if err := json.Unmarshal(v, &ev); err != nil {
			return fmt.Errorf("decode event %d: %w", seqlog.Seq(k), err)
		}
		fn(ev, v)
		return nil
	})
}

// scan calls fn with the key and stored bytes of up to limit events of session after seq after,
// in order; both live only as long as the call.
func (l *Log) scan(session string, after uint64, limit int, fn func(k, v []byte) error) error {
	err := l.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents).Bucket([]byte(session))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		n := 0
		for k, v := c.Seek(seqlog.Key(after + 1)); k != nil && (limit <= 0 || n < limit); k, v = c.Next() {
			if err := fn(k, v); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read events of session %s: %w", session, err)
	}
	return nil
}

// Subscription streams a session's events to one watcher: every stored event after its cursor,
// then live ones.
type Subscription struct {
	l       *Log
	session string
	c       chan Entry
	stop    chan struct{} // closed by Close while catching up

	// Guarded by l.mu.
	cursor  uint64 // last seq sent on c
	live    bool   // registered with the publisher, which is then the only sender on c
	closing bool
	ended   bool
	err     error
}

// Subscribe streams every stored event of session with Seq > after, then live ones, with no gap
// and no duplicate between the two.
func (l *Log) Subscribe(session string, after uint64) *Subscription {
	s := &Subscription{
		l:       l,
		session: session,
		c:       make(chan Entry, subscriberBuffer),
		stop:    make(chan struct{}),
		cursor:  after,
	}
	go s.catchUp(after)
	return s
}

// catchUp sends stored events until it has read everything the publisher has handed out, then
// registers the subscription as live under the same lock the publisher holds, so nothing published
// in between is missed; the publisher skips what catchUp already sent.
func (s *Subscription) catchUp(cursor uint64) {
	l := s.l
	for {
		evs, err := l.entries(s.session, cursor, replayPage)
		if err != nil {
			l.mu.Lock()
			s.end(err)
			l.mu.Unlock()
			return
		}
		for _, ev := range evs {
			select {
			case s.c <- ev:
				cursor = ev.Seq
			case <-s.stop:
				l.mu.Lock()
				s.end(nil)
				l.mu.Unlock()
				return
			case <-l.quit:
				l.mu.Lock()
				s.end(ErrClosed)
				l.mu.Unlock()
				return
			}
		}
		if len(evs) == replayPage {
			continue
		}
		l.mu.Lock()
		switch {
		case s.closing:
			s.end(nil)
		case l.closed:
			s.end(ErrClosed)
		case l.deleted[s.session]:
			s.end(ErrDeleted)
		case l.published[s.session] <= cursor:
			s.cursor = cursor
			s.live = true
			set := l.subs[s.session]
			if set == nil {
				set = map[*Subscription]struct{}{}
				l.subs[s.session] = set
			}
			set[s] = struct{}{}
		default:
			l.mu.Unlock()
			continue // more was published while reading; read it from the store
		}
		l.mu.Unlock()
		return
	}
}

// end closes the channel once; l.mu must be held, and c must have no other sender.
func (s *Subscription) end(err error) {
	if s.ended {
		return
	}
	s.ended = true
	s.err = err
	if s.live {
		set := s.l.subs[s.session]
		delete(set, s)
		if len(set) == 0 {
			delete(s.l.subs, s.session)
		}
	}
	close(s.c)
}

// C returns the channel of events. It is closed when the subscription ends.
func (s *Subscription) C() <-chan Entry { return s.c }

// Err says why the subscription ended, once C is closed: ErrSlow if the watcher fell behind (it
// must reconnect from its last seq), ErrClosed if the log closed, ErrDeleted if the session was
// deleted, nil after Close.
func (s *Subscription) Err() error {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	return s.err
}

// Close ends the subscription. Events already buffered in C may still be read.
func (s *Subscription) Close() {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	switch {
	case s.ended:
	case s.live:
		s.end(nil)
	case !s.closing:
		// catchUp is the only sender on c until it goes live; let it close c itself.
		s.closing = true
		close(s.stop)
	}
}

// LastSeq returns the seq of session's last stored event (0 when it has none).
func (l *Log) LastSeq(session string) (uint64, error) {
	var seq uint64
	err := l.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketEvents).Bucket([]byte(session)); b != nil {
			seq = seqlog.Last(b)
		}
		return nil
	})
	return seq, err
}

// TurnOpen reports whether session's log has a prompt with no turn_end after it: a turn that was
// running when the daemon stopped.
func (l *Log) TurnOpen(session string) (bool, error) {
	open := false
	err := l.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents).Bucket([]byte(session))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			var ev struct {
				Type api.EventType `json:"type"`
			}
			if err := json.Unmarshal(v, &ev); err != nil {
				return fmt.Errorf("decode event %d: %w", seqlog.Seq(k), err)
			}
			switch ev.Type {
			case api.EventTurnEnd:
				return nil
			case api.EventPrompt:
				open = true
				return nil
			}
		}
		return nil
	})
	return open, err
}
