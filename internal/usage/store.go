package usage

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/hiloop/hiloop/internal/seqlog"
	"github.com/hiloop/hiloop/internal/store"
)

// The "usage" bucket holds one nested bucket per sandbox id:
//
//	total    Totals of every record of the sandbox, ever
//	budget   the sandbox's budget (int64); absent: none
//	count    how many records "records" holds
//	trimmed  the request time (unix nanos) of the newest record retention deleted
//	records  request time (unix nanos) ‖ seq → Record JSON, the newest MaxRecords
//	hours    hour (hours since the epoch, uint32) ‖ session ‖ 0 ‖ model → Totals
//	sessions session id → Totals ‖ budget (int64)
//
// Numbers are big-endian; Totals is Requests, Input, Output, CacheRead, CacheWrite.
var (
	bucketUsage    = []byte("usage")
	keyTotal       = []byte("total")
	keyBudget      = []byte("budget")
	keyCount       = []byte("count")
	keyTrimmed     = []byte("trimmed")
	bucketRecords  = []byte("records")
	bucketHours    = []byte("hours")
	bucketSessions = []byte("sessions")
)

const (
	// MaxRecords is how many individual records are kept per sandbox, the newest by request
	// time; the roll-ups and totals keep the rest. A record takes about 300 bytes, so a
	// sandbox's records stay under ~6 MB; a harness making a request every few seconds all day
	// keeps about a week of them.
	MaxRecords = 20000
	// QueueSize is how many records may wait for the writer. Add blocks once it is full (only
	// when the disk has stalled): a usage record is what budgets are enforced on, so it is not
	// dropped the way an egress audit record may be.
	QueueSize = 4096
	// maxBatch bounds how many records share one transaction and fsync.
	maxBatch = 1024
)

// ErrClosed is returned once the store is closed.
var ErrClosed = errors.New("usage store is closed")

// ErrGone is returned for a budget set on a sandbox or session already deleted.
var ErrGone = errors.New("deleted")

// Config tunes a Store; the zero value is the daemon's: MaxRecords per sandbox, QueueSize.
type Config = seqlog.Config

// Store is the usage of every sandbox. Add queues a record for one writer goroutine (a
// seqlog.Writer), which stores what is queued in one transaction; the totals budgets are checked
// against are held in memory as well (loaded from the file on first use, counted at Add), so a
// check is a map lookup that already counts records not yet written.
type Store struct {
	db  *store.Area
	max int64
	lg  *slog.Logger
	q   chan Record                 // what waits for the writer; Add blocks when it is full
	w   *seqlog.Writer[Record, *op] // stores q; serves the ops

	mu       sync.Mutex
	closed   bool
	accounts map[string]*account // accountKey → totals and budget, for Check
	// gone holds the accountKey of every sandbox and session deleted while the store is open:
	// nothing more is stored for them. Ids are never reused; an entry is a few dozen bytes.
	gone map[string]bool
}

// account is what Check needs of a sandbox or a session.
type account struct {
	total  Totals
	budget int64
}

// accountKey names a sandbox's account (session "") or a session's.
func accountKey(sandboxID, sessionID string) string { return sandboxID + "\x00" + sessionID }

type opKind int

const (
	opFlush opKind = iota
	opDeleteSandbox
	opDeleteSession
)

// op is a request the writer serves in order with the records queued before it.
type op struct {
	kind             opKind
	sandbox, session string
	err              error
	done             chan struct{}
}

// Open opens the store kept in db (the store.Area of this package), creating its bucket if
// needed, and starts its writer. The file belongs to the caller.
func Open(db *store.Area, cfg Config) (*Store, error) {
	if err := seqlog.CreateBuckets(db.Update, "init usage bucket", bucketUsage); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults(MaxRecords, QueueSize)
	s := &Store{
		db:       db,
		max:      int64(cfg.MaxRecords),
		lg:       cfg.Logger,
		q:        make(chan Record, cfg.QueueSize),
		accounts: map[string]*account{},
		gone:     map[string]bool{},
	}
	s.w = seqlog.StartWriter(maxBatch, s.take, s.commit)
	return s, nil
}

// Close stores what is queued and stops the writer. It does not close the database.
func (s *Store) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.w.Close()
}

// Add queues rec to be stored, and counts it at once towards its sandbox's and session's totals.
// It blocks only while QueueSize records wait for a stalled disk. A record without a sandbox id,
// for a deleted sandbox, or after Close is not stored (it is logged); one for a deleted session
// is stored unattributed. Labels from outside the daemon are cleaned with Label.
func (s *Store) Add(rec Record) {
	rec.Model = Label(rec.Model)
	rec.HarnessSession = Label(rec.HarnessSession)
	rec.Time = rec.Time.UTC()
	s.mu.Lock()
	if s.closed || rec.SandboxID == "" || s.gone[accountKey(rec.SandboxID, "")] {
		s.mu.Unlock()
		s.lg.Warn("usage record not stored", "sandbox", rec.SandboxID, "closed", s.closed, "tokens", rec.Total())
		return
	}
	if s.gone[accountKey(rec.SandboxID, rec.SessionID)] {
		rec.SessionID = ""
	}
	t := Totals{Tokens: rec.Tokens, Requests: 1}
	a, err := s.accountLocked(rec.SandboxID, "")
	if err == nil {
		a.total = a.total.add(t)
	}
	if rec.SessionID != "" {
		if a, serr := s.accountLocked(rec.SandboxID, rec.SessionID); serr == nil {
			a.total = a.total.add(t)
		} else {
			err = serr
		}
	}
	s.mu.Unlock()
	if err != nil {
		// The record is still stored; only the in-memory count missed it, and it is loaded
		// from the file the next time.
		s.lg.Error("load usage totals", "sandbox", rec.SandboxID, "err", err)
	}
	select {
	case s.q <- rec:
		s.w.Wake()
	case <-s.w.Done():
	}
}

// accountLocked returns the account of a sandbox (session "") or a session, loading it from the
// file the first time. Called with s.mu held: a read transaction never waits for the writer.
func (s *Store) accountLocked(sandboxID, sessionID string) (*account, error) {
	k := accountKey(sandboxID, sessionID)
	if a := s.accounts[k]; a != nil {
		return a, nil
	}
	a := &account{}
	if s.gone[accountKey(sandboxID, "")] || s.gone[k] {
		return a, nil // deleted: nothing to load, and nothing to keep in memory
	}
	err := s.db.View(func(tx *store.Tx) error {
		sb := tx.Bucket(bucketUsage).Bucket([]byte(sandboxID))
		if sb == nil {
			return nil
		}
		if sessionID == "" {
			a.total = decodeTotals(sb.Get(keyTotal))
			a.budget = decodeInt(sb.Get(keyBudget))
			return nil
		}
		if ss := sb.Bucket(bucketSessions); ss != nil {
			a.total, a.budget = decodeSession(ss.Get([]byte(sessionID)))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.accounts[k] = a
	return a, nil
}

// Check reports the first budget found spent for a request of the sandbox, and of the session
// when it is not "": the sandbox's is checked first. nil: the request may go. It counts every
// record added so far, written or not.
func (s *Store) Check(sandboxID, sessionID string) (*Exceeded, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	for _, session := range []string{"", sessionID} {
		a, err := s.accountLocked(sandboxID, session)
		if err != nil {
			return nil, fmt.Errorf("read the usage of sandbox %s: %w", sandboxID, err)
		}
		if a.budget > 0 && a.total.Total() >= a.budget {
			e := &Exceeded{Scope: ScopeSandbox, SandboxID: sandboxID, Used: a.total.Total(), Limit: a.budget}
			if session != "" {
				e.Scope, e.SessionID = ScopeSession, session
			}
			return e, nil
		}
		if sessionID == "" {
			break
		}
	}
	return nil, nil
}

// SandboxUsage returns a sandbox's totals and budget (0: none), counting records not yet
// written.
func (s *Store) SandboxUsage(sandboxID string) (Totals, int64, error) {
	return s.usage(sandboxID, "")
}

// SessionUsage returns a session's totals and budget (0: none), counting records not yet
// written.
func (s *Store) SessionUsage(sandboxID, sessionID string) (Totals, int64, error) {
	return s.usage(sandboxID, sessionID)
}

func (s *Store) usage(sandboxID, sessionID string) (Totals, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Totals{}, 0, ErrClosed
	}
	a, err := s.accountLocked(sandboxID, sessionID)
	if err != nil {
		return Totals{}, 0, err
	}
	return a.total, a.budget, nil
}

// SetSandboxBudget makes limit (tokens, as Tokens.Total counts them) the sandbox's budget; 0
// removes it. A raised budget lets the next request through.
func (s *Store) SetSandboxBudget(sandboxID string, limit int64) error {
	return s.setBudget(sandboxID, "", limit)
}

// SetSessionBudget makes limit the session's budget; 0 removes it.
func (s *Store) SetSessionBudget(sandboxID, sessionID string, limit int64) error {
	if sessionID == "" {
		return errors.New("set a session budget: no session id")
	}
	return s.setBudget(sandboxID, sessionID, limit)
}

func (s *Store) setBudget(sandboxID, sessionID string, limit int64) error {
	if sandboxID == "" {
		return errors.New("set a budget: no sandbox id")
	}
	if limit < 0 {
		return fmt.Errorf("set a budget: %d tokens is negative", limit)
	}
	// s.mu is held across the write so that the file and the account change together.
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case s.gone[accountKey(sandboxID, "")] || s.gone[accountKey(sandboxID, sessionID)]:
		return fmt.Errorf("set a budget: %w", ErrGone)
	}
	a, err := s.accountLocked(sandboxID, sessionID)
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *store.Tx) error {
		sb, err := tx.Bucket(bucketUsage).CreateBucketIfNotExists([]byte(sandboxID))
		if err != nil {
			return err
		}
		if sessionID == "" {
			if limit == 0 {
				return sb.Delete(keyBudget)
			}
			return sb.Put(keyBudget, encodeInt(limit))
		}
		ss, err := sb.CreateBucketIfNotExists(bucketSessions)
		if err != nil {
			return err
		}
		t, _ := decodeSession(ss.Get([]byte(sessionID)))
		return ss.Put([]byte(sessionID), encodeSession(t, limit))
	})
	if err != nil {
		return fmt.Errorf("store the budget: %w", err)
	}
	a.budget = limit
	return nil
}

// Flush waits until every record added before it is stored.
func (s *Store) Flush() error { return s.do(&op{kind: opFlush}) }

// DeleteSandbox removes everything the store holds of the sandbox: records, roll-ups, totals,
// budgets, its sessions'; records queued or added later for it are not stored.
func (s *Store) DeleteSandbox(sandboxID string) error {
	s.mu.Lock()
	if !s.closed {
		s.gone[accountKey(sandboxID, "")] = true
		for k := range s.accounts {
			if len(k) > len(sandboxID) && k[:len(sandboxID)+1] == sandboxID+"\x00" {
				delete(s.accounts, k)
			}
		}
	}
	s.mu.Unlock()
	return s.do(&op{kind: opDeleteSandbox, sandbox: sandboxID})
}

// DeleteSession forgets a session: its totals and budget go, and its records and roll-ups stay
// as unattributed usage of its sandbox, whose totals and budget are unchanged (deleting a
// session does not give its sandbox tokens back). Records for it queued or added later are
// stored unattributed.
func (s *Store) DeleteSession(sandboxID, sessionID string) error {
	if sessionID == "" {
		return errors.New("delete a session's usage: no session id")
	}
	s.mu.Lock()
	if !s.closed {
		s.gone[accountKey(sandboxID, sessionID)] = true
		delete(s.accounts, accountKey(sandboxID, sessionID))
	}
	s.mu.Unlock()
	return s.do(&op{kind: opDeleteSession, sandbox: sandboxID, session: sessionID})
}

// Prune deletes the usage of every sandbox keep says no longer exists, and of every session
// keepSession says no longer exists: those deleted while no daemon was there to be told.
func (s *Store) Prune(keep func(sandboxID string) bool, keepSession func(sandboxID, sessionID string) bool) error {
	var sandboxes []string
	var sessions [][2]string
	err := s.db.View(func(tx *store.Tx) error {
		return tx.Bucket(bucketUsage).ForEachBucket(func(k []byte) error {
			id := string(k)
			if !keep(id) {
				sandboxes = append(sandboxes, id)
				return nil
			}
			ss := tx.Bucket(bucketUsage).Bucket(k).Bucket(bucketSessions)
			if ss == nil {
				return nil
			}
			return ss.ForEach(func(k, _ []byte) error {
				if !keepSession(id, string(k)) {
					sessions = append(sessions, [2]string{id, string(k)})
				}
				return nil
			})
		})
	})
	if err != nil {
		return fmt.Errorf("list usage: %w", err)
	}
	for _, id := range sandboxes {
		if err := s.DeleteSandbox(id); err != nil {
			return err
		}
	}
	for _, ss := range sessions {
		if err := s.DeleteSession(ss[0], ss[1]); err != nil {
			return err
		}
	}
	return nil
}

// do hands o to the writer and waits for it.
func (s *Store) do(o *op) error {
	o.done = make(chan struct{})
	if !s.w.Do(o) {
		return ErrClosed
	}
	<-o.done
	return o.err
}

// take appends to batch up to n queued records, in the order they came, and reports whether
// any are left.
func (s *Store) take(batch []Record, n int) ([]Record, bool) {
	for len(batch) < n {
		select {
		case r := <-s.q:
			batch = append(batch, r)
		default:
			return batch, false
		}
	}
	return batch, len(s.q) > 0
}

// commit stores one batch and then runs the operations. A failure is logged; the records are
// lost to the file, though the in-memory totals (and so budgets) still count them until the
// daemon restarts.
func (s *Store) commit(batch []Record, ops []*op) {
	if len(batch) == 0 && len(ops) == 0 {
		return
	}
	// Records of a sandbox deleted since they were queued are not stored.
	s.mu.Lock()
	keep := batch[:0]
	for _, rec := range batch {
		if !s.gone[accountKey(rec.SandboxID, "")] {
			keep = append(keep, rec)
		}
	}
	s.mu.Unlock()
	batch = keep
	err := s.db.Update(func(tx *store.Tx) error {
		root := tx.Bucket(bucketUsage)
		touched := map[string]bool{}
		for _, rec := range batch {
			if err := s.put(root, rec); err != nil {
				return err
			}
			touched[rec.SandboxID] = true
		}
		for id := range touched {
			if err := s.trim(root.Bucket([]byte(id))); err != nil {
				return err
			}
		}
		for _, o := range ops {
			switch o.kind {
			case opDeleteSandbox:
				if err := root.DeleteBucket([]byte(o.sandbox)); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
					return err
				}
			case opDeleteSession:
				if sb := root.Bucket([]byte(o.sandbox)); sb != nil {
					if err := unattribute(sb, o.session); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		s.lg.Error("store usage records", "records", len(batch), "err", err)
	}
	for _, o := range ops {
		if err != nil {
			o.err = fmt.Errorf("usage store: %w", err)
		}
		close(o.done)
	}
}

// put stores rec and counts it in its sandbox's total, roll-up and session.
func (s *Store) put(root *bolt.Bucket, rec Record) error {
	sb, err := root.CreateBucketIfNotExists([]byte(rec.SandboxID))
	if err != nil {
		return err
	}
	recs, err := sb.CreateBucketIfNotExists(bucketRecords)
	if err != nil {
		return err
	}
	seq, err := recs.NextSequence()
	if err != nil {
		return err
	}
	v, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := recs.Put(recordKey(rec.Time, seq), v); err != nil {
		return err
	}
	if err := sb.Put(keyCount, encodeInt(decodeInt(sb.Get(keyCount))+1)); err != nil {
		return err
	}
	t := Totals{Tokens: rec.Tokens, Requests: 1}
	if err := sb.Put(keyTotal, encodeTotals(decodeTotals(sb.Get(keyTotal)).add(t))); err != nil {
		return err
	}
	hours, err := sb.CreateBucketIfNotExists(bucketHours)
	if err != nil {
		return err
	}
	hk := hourKey(hourOf(rec.Time), rec.SessionID, rec.Model)
	if err := hours.Put(hk, encodeTotals(decodeTotals(hours.Get(hk)).add(t))); err != nil {
		return err
	}
	if rec.SessionID == "" {
		return nil
	}
	ss, err := sb.CreateBucketIfNotExists(bucketSessions)
	if err != nil {
		return err
	}
	st, budget := decodeSession(ss.Get([]byte(rec.SessionID)))
	return ss.Put([]byte(rec.SessionID), encodeSession(st.add(t), budget))
}

// trim deletes the oldest records of a sandbox until it holds at most s.max, noting the newest
// time deleted so that queries know where the records stop covering.
func (s *Store) trim(sb *bolt.Bucket) error {
	n := decodeInt(sb.Get(keyCount))
	if n <= s.max {
		return nil
	}
	recs := sb.Bucket(bucketRecords)
	var keys [][]byte
	c := recs.Cursor()
	for k, _ := c.First(); k != nil && int64(len(keys)) < n-s.max; k, _ = c.Next() {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if err := recs.Delete(k); err != nil {
			return err
		}
	}
	if len(keys) > 0 {
		last := int64(binary.BigEndian.Uint64(keys[len(keys)-1]))
		if last > decodeInt(sb.Get(keyTrimmed)) {
			if err := sb.Put(keyTrimmed, encodeInt(last)); err != nil {
				return err
			}
		}
	}
	return sb.Put(keyCount, encodeInt(n-int64(len(keys))))
}

// unattribute moves a session's records and roll-ups to the sandbox's unattributed usage and
// deletes its entry.
func unattribute(sb *bolt.Bucket, session string) error {
	if recs := sb.Bucket(bucketRecords); recs != nil {
		type kv struct{ k, v []byte }
		var changed []kv
		err := recs.ForEach(func(k, v []byte) error {
			var rec Record
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode a usage record: %w", err)
			}
			if rec.SessionID != session {
				return nil
			}
			rec.SessionID = ""
			nv, err := json.Marshal(rec)
			changed = append(changed, kv{append([]byte(nil), k...), nv})
			return err
		})
		if err != nil {
			return err
		}
		for _, c := range changed {
			if err := recs.Put(c.k, c.v); err != nil {
				return err
			}
		}
	}
	if hours := sb.Bucket(bucketHours); hours != nil {
		type row struct {
			hour  uint32
			model string
			t     Totals
		}
		var rows []row
		var keys [][]byte
		err := hours.ForEach(func(k, v []byte) error {
			hour, sess, model, ok := splitHourKey(k)
			if ok && sess == session {
				rows = append(rows, row{hour, model, decodeTotals(v)})
				keys = append(keys, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := hours.Delete(k); err != nil {
				return err
			}
		}
		for _, r := range rows {
			k := hourKey(r.hour, "", r.model)
			if err := hours.Put(k, encodeTotals(decodeTotals(hours.Get(k)).add(r.t))); err != nil {
				return err
			}
		}
	}
	if ss := sb.Bucket(bucketSessions); ss != nil {
		return ss.Delete([]byte(session))
	}
	return nil
}

func recordKey(t time.Time, seq uint64) []byte {
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, uint64(max(t.UnixNano(), 0)))
	binary.BigEndian.PutUint64(k[8:], seq)
	return k
}

// hourOf is t's hour counted from the Unix epoch.
func hourOf(t time.Time) uint32 { return uint32(max(t.Unix(), 0) / 3600) }

func hourTime(h uint32) time.Time { return time.Unix(int64(h)*3600, 0).UTC() }

func hourKey(hour uint32, session, model string) []byte {
	k := make([]byte, 4, 4+len(session)+1+len(model))
	binary.BigEndian.PutUint32(k, hour)
	k = append(k, session...)
	k = append(k, 0)
	return append(k, model...)
}

func splitHourKey(k []byte) (hour uint32, session, model string, ok bool) {
	if len(k) < 5 {
		return 0, "", "", false
	}
	rest := k[4:]
	for i, b := range rest {
		if b == 0 {
			return binary.BigEndian.Uint32(k), string(rest[:i]), string(rest[i+1:]), true
		}
	}
	return 0, "", "", false
}

func encodeInt(n int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(n))
	return b
}

func decodeInt(b []byte) int64 {
	if len(b) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

const totalsSize = 5 * 8

func encodeTotals(t Totals) []byte {
	b := make([]byte, totalsSize)
	for i, n := range []int64{t.Requests, t.Input, t.Output, t.CacheRead, t.CacheWrite} {
		binary.BigEndian.PutUint64(b[i*8:], uint64(n))
	}
	return b
}

func decodeTotals(b []byte) Totals {
	if len(b) < totalsSize {
		return Totals{}
	}
	n := func(i int) int64 { return int64(binary.BigEndian.Uint64(b[i*8:])) }
	return Totals{Requests: n(0), Tokens: Tokens{Input: n(1), Output: n(2), CacheRead: n(3), CacheWrite: n(4)}}
}

func encodeSession(t Totals, budget int64) []byte {
	return append(encodeTotals(t), encodeInt(budget)...)
}

func decodeSession(b []byte) (Totals, int64) {
	if len(b) < totalsSize+8 {
		return decodeTotals(b), 0
	}
	return decodeTotals(b), decodeInt(b[totalsSize:])
}
