package usage

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hiloop/hiloop/internal/store"
)

// Query selects usage: of one sandbox (SandboxID, else every sandbox), of one session (SessionID,
// else every session and the unattributed usage), from Since on (zero: all of it). Records are
// written by the store's writer: call Flush first to see every record added so far.
type Query struct {
	SandboxID string
	SessionID string
	Since     time.Time
	// Sandboxes, if not nil, keeps the usage of the sandboxes whose ids it reports true for
	// (the API's: those of the caller's namespace).
	Sandboxes func(id string) bool
}

// Group is the usage of one group of a Report: the fields it is grouped by are set, the others
// empty. An unattributed group of a sandbox has SessionID "".
type Group struct {
	SandboxID string `json:"sandbox_id,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	Model     string `json:"model,omitempty"`
	Day       string `json:"day,omitempty"` // UTC, 2006-01-02
	Totals
}

// Report is the usage a Query selected, summed and grouped.
type Report struct {
	// From is where the totals start: the query's Since, or the top of its hour when the
	// records of that hour are past retention and the hourly roll-ups answer instead; zero for
	// all usage.
	From      time.Time `json:"from,omitzero"`
	Total     Totals    `json:"total"`
	BySandbox []Group   `json:"by_sandbox"`
	BySession []Group   `json:"by_session"` // by sandbox and session
	ByModel   []Group   `json:"by_model"`
	ByDay     []Group   `json:"by_day"`
}

// report sums rows into a Report.
type report struct {
	r                            Report
	sandbox, session, model, day map[Group]*Totals
}

func newReport(from time.Time) *report {
	return &report{r: Report{From: from}, sandbox: map[Group]*Totals{}, session: map[Group]*Totals{},
		model: map[Group]*Totals{}, day: map[Group]*Totals{}}
}

func (rp *report) add(sandbox, session, model string, at time.Time, t Totals) {
	rp.r.Total = rp.r.Total.add(t)
	bump(rp.sandbox, Group{SandboxID: sandbox}, t)
	bump(rp.session, Group{SandboxID: sandbox, SessionID: session}, t)
	bump(rp.model, Group{Model: model}, t)
	bump(rp.day, Group{Day: at.UTC().Format(time.DateOnly)}, t)
}

func bump(m map[Group]*Totals, g Group, t Totals) {
	sum := m[g]
	if sum == nil {
		sum = &Totals{}
		m[g] = sum
	}
	*sum = sum.add(t)
}

func (rp *report) done() Report {
	list := func(m map[Group]*Totals) []Group {
		out := make([]Group, 0, len(m))
		for g, t := range m {
			g.Totals = *t
			out = append(out, g)
		}
		slices.SortFunc(out, func(a, b Group) int {
			return strings.Compare(a.SandboxID+"\x00"+a.SessionID+"\x00"+a.Model+"\x00"+a.Day,
				b.SandboxID+"\x00"+b.SessionID+"\x00"+b.Model+"\x00"+b.Day)
		})
		return out
	}
	rp.r.BySandbox, rp.r.BySession = list(rp.sandbox), list(rp.session)
	rp.r.ByModel, rp.r.ByDay = list(rp.model), list(rp.day)
	return rp.r
}

// Query sums the usage q selects by sandbox, session, model and day. Whole hours come from the
// hourly roll-ups; the part of Since's hour after Since comes from the records while retention
// still holds them, and otherwise the whole hour counts (Report.From says so).
func (s *Store) Query(q Query) (Report, error) {
	rp := newReport(q.Since.UTC())
	err := s.db.View(func(tx *store.Tx) error {
		return s.eachSandbox(tx, q.SandboxID, func(id string, sb *bolt.Bucket) error {
			if q.Sandboxes != nil && !q.Sandboxes(id) {
				return nil
			}
			from := uint32(0)
			if !q.Since.IsZero() {
				from = hourOf(q.Since)
				if !q.Since.Equal(hourTime(from)) {
					if covered(sb, q.Since) {
						if err := partialHour(sb, id, q, rp); err != nil {
							return err
						}
						from++
					} else if h := hourTime(from); h.Before(rp.r.From) {
						rp.r.From = h
					}
				}
			}
			hours := sb.Bucket(bucketHours)
			if hours == nil {
				return nil
			}
			start := make([]byte, 4)
			binary.BigEndian.PutUint32(start, from)
			c := hours.Cursor()
			for k, v := c.Seek(start); k != nil; k, v = c.Next() {
				hour, session, model, ok := splitHourKey(k)
				if !ok || (q.SessionID != "" && session != q.SessionID) {
					continue
				}
				rp.add(id, session, model, hourTime(hour), decodeTotals(v))
			}
			return nil
		})
	})
	if err != nil {
		return Report{}, fmt.Errorf("read usage: %w", err)
	}
	return rp.done(), nil
}

// covered reports whether a sandbox's records still hold every request from since on.
func covered(sb *bolt.Bucket, since time.Time) bool {
	trimmed := decodeInt(sb.Get(keyTrimmed))
	return trimmed == 0 || trimmed < since.UnixNano()
}

// partialHour adds the records from q.Since to the end of its hour.
func partialHour(sb *bolt.Bucket, id string, q Query, rp *report) error {
	recs := sb.Bucket(bucketRecords)
	if recs == nil {
		return nil
	}
	end := hourTime(hourOf(q.Since) + 1)
	return scanRecords(recs, q.Since, func(rec Record) bool {
		if !rec.Time.Before(end) {
			return false
		}
		if q.SessionID == "" || rec.SessionID == q.SessionID {
			rp.add(id, rec.SessionID, rec.Model, rec.Time, Totals{Tokens: rec.Tokens, Requests: 1})
		}
		return true
	})
}

// Records returns the records q selects that retention still holds, oldest first, at most limit
// of them (0: all).
func (s *Store) Records(q Query, limit int) ([]Record, error) {
	var out []Record
	err := s.db.View(func(tx *store.Tx) error {
		return s.eachSandbox(tx, q.SandboxID, func(_ string, sb *bolt.Bucket) error {
			recs := sb.Bucket(bucketRecords)
			if recs == nil {
				return nil
			}
			n := 0
			return scanRecords(recs, q.Since, func(rec Record) bool {
				if q.SessionID == "" || rec.SessionID == q.SessionID {
					out = append(out, rec)
					n++
				}
				return limit <= 0 || n < limit
			})
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read usage records: %w", err)
	}
	slices.SortStableFunc(out, func(a, b Record) int { return a.Time.Compare(b.Time) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// scanRecords calls f with each record from since on, in time order, until it returns false.
func scanRecords(recs *bolt.Bucket, since time.Time, f func(Record) bool) error {
	c := recs.Cursor()
	var k, v []byte
	if since.IsZero() {
		k, v = c.First()
	} else {
		k, v = c.Seek(recordKey(since, 0))
	}
	for ; k != nil; k, v = c.Next() {
		var rec Record
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("decode usage record %x: %w", k, err)
		}
		if !f(rec) {
			return nil
		}
	}
	return nil
}

// eachSandbox calls f for the sandbox id (when not "") or for every sandbox.
func (s *Store) eachSandbox(tx *store.Tx, id string, f func(string, *bolt.Bucket) error) error {
	root := tx.Bucket(bucketUsage)
	if id != "" {
		sb := root.Bucket([]byte(id))
		if sb == nil {
			return nil
		}
		return f(id, sb)
	}
	return root.ForEachBucket(func(k []byte) error {
		return f(string(bytes.Clone(k)), root.Bucket(k))
	})
}
