package usage

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/store"
)

func openDB(t *testing.T, path string) *store.Store {
	t.Helper()
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// openStore opens a store on the bbolt file at path; it and the file are closed at the end of
// the test, or earlier by reopen.
func openStore(t *testing.T, path string, cfg Config) (*Store, *store.Store) {
	t.Helper()
	db := openDB(t, path)
	s, err := Open(db.Owned("internal/usage"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		db.Close()
	})
	return s, db
}

// reopen closes a store and its file and opens them again, as a daemon restart does.
func reopen(t *testing.T, s *Store, db *store.Store, path string, cfg Config) *Store {
	t.Helper()
	s.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ = openStore(t, path, cfg)
	return s
}

// testStore opens a store on a fresh file.
func testStore(t *testing.T, cfg Config) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	s, _ := openStore(t, path, cfg)
	return s, path
}

// at is a fixed day's time: 2030-03-04 at h:m UTC, plus days.
func at(days, h, m int) time.Time {
	return time.Date(2030, 3, 4+days, h, m, 0, 0, time.UTC)
}

func rec(sandbox, session, model string, t time.Time, in, out, cr, cw int64) Record {
	return Record{Time: t, SandboxID: sandbox, SessionID: session, Provider: "anthropic", Model: model,
		Tokens: Tokens{Input: in, Output: out, CacheRead: cr, CacheWrite: cw}, Status: 200, Duration: time.Second}
}

func flush(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
}

func totals(requests, in, out, cr, cw int64) Totals {
	return Totals{Requests: requests, Tokens: Tokens{Input: in, Output: out, CacheRead: cr, CacheWrite: cw}}
}

// fixture is usage of two sandboxes over two days: sb1 has sessions s1 and s2 and an
// unattributed request, two models; sb2 one session.
func addFixture(s *Store) {
	s.Add(rec("sb1", "s1", "claude-a", at(0, 9, 10), 100, 10, 1000, 50))
	s.Add(rec("sb1", "s1", "claude-a", at(0, 9, 40), 200, 20, 2000, 0))
	s.Add(rec("sb1", "s2", "claude-b", at(0, 23, 59), 1, 2, 3, 4))
	s.Add(rec("sb1", "", "claude-b", at(1, 0, 5), 5, 5, 0, 0))
	s.Add(rec("sb2", "s3", "gpt-x", at(1, 12, 0), 7, 8, 9, 0))
}

func TestQueryGroups(t *testing.T) {
	s, _ := testStore(t, Config{})
	addFixture(s)
	flush(t, s)

	r, err := s.Query(Query{})
	if err != nil {
		t.Fatal(err)
	}
	if want := totals(5, 313, 45, 3012, 54); r.Total != want {
		t.Errorf("total %+v, want %+v", r.Total, want)
	}
	want := Report{
		Total: totals(5, 313, 45, 3012, 54),
		BySandbox: []Group{
			{SandboxID: "sb1", Totals: totals(4, 306, 37, 3003, 54)},
			{SandboxID: "sb2", Totals: totals(1, 7, 8, 9, 0)},
		},
		BySession: []Group{
			{SandboxID: "sb1", Totals: totals(1, 5, 5, 0, 0)},
			{SandboxID: "sb1", SessionID: "s1", Totals: totals(2, 300, 30, 3000, 50)},
			{SandboxID: "sb1", SessionID: "s2", Totals: totals(1, 1, 2, 3, 4)},
			{SandboxID: "sb2", SessionID: "s3", Totals: totals(1, 7, 8, 9, 0)},
		},
		ByModel: []Group{
			{Model: "claude-a", Totals: totals(2, 300, 30, 3000, 50)},
			{Model: "claude-b", Totals: totals(2, 6, 7, 3, 4)},
			{Model: "gpt-x", Totals: totals(1, 7, 8, 9, 0)},
		},
		ByDay: []Group{
			{Day: "2030-03-04", Totals: totals(3, 301, 32, 3003, 54)},
			{Day: "2030-03-05", Totals: totals(2, 12, 13, 9, 0)},
		},
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("report\n%+v\nwant\n%+v", r, want)
	}

	r, err = s.Query(Query{SandboxID: "sb1", SessionID: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := totals(2, 300, 30, 3000, 50); r.Total != want || len(r.BySession) != 1 {
		t.Errorf("session s1: %+v, want total %+v in one group", r, want)
	}
	r, err = s.Query(Query{SessionID: "s3"})
	if err != nil {
		t.Fatal(err)
	}
	if want := totals(1, 7, 8, 9, 0); r.Total != want {
		t.Errorf("session s3 across sandboxes: %+v, want %+v", r.Total, want)
	}

	// Since inside an hour: the records answer for the rest of that hour, exactly.
	r, err = s.Query(Query{SandboxID: "sb1", Since: at(0, 9, 30)})
	if err != nil {
		t.Fatal(err)
	}
	if want := totals(3, 206, 27, 2003, 4); r.Total != want || !r.From.Equal(at(0, 9, 30)) {
		t.Errorf("since 09:30: total %+v from %v, want %+v from 09:30", r.Total, r.From, want)
	}
	// Since on the hour: roll-ups alone.
	r, err = s.Query(Query{Since: at(1, 0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if want := totals(2, 12, 13, 9, 0); r.Total != want {
		t.Errorf("since day 2: %+v, want %+v", r.Total, want)
	}

	recs, err := s.Records(Query{SandboxID: "sb1", Since: at(0, 9, 30)}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || !recs[0].Time.Equal(at(0, 9, 40)) || recs[1].SessionID != "s2" || recs[0].Input != 200 {
		t.Errorf("records since 09:30, limit 2: %+v", recs)
	}
}

func TestBudgets(t *testing.T) {
	s, _ := testStore(t, Config{})
	if err := s.SetSandboxBudget("sb", 100); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSessionBudget("sb", "ses", 30); err != nil {
		t.Fatal(err)
	}
	check := func(session string) *Exceeded {
		t.Helper()
		e, err := s.Check("sb", session)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if e := check("ses"); e != nil {
		t.Fatalf("nothing used yet: %+v", e)
	}
	// Counted at Add, before the writer stores it: a budget check needs no flush.
	s.Add(rec("sb", "ses", "m", at(0, 1, 0), 10, 10, 5, 5))
	if e := check("ses"); e == nil || *e != (Exceeded{Scope: ScopeSession, SandboxID: "sb", SessionID: "ses", Used: 30, Limit: 30}) {
		t.Fatalf("session budget of 30 after 30 tokens: %+v", e)
	}
	if e := check("other"); e != nil {
		t.Fatalf("another session of the sandbox: %+v", e)
	}
	s.Add(rec("sb", "", "m", at(0, 1, 0), 60, 20, 0, 0))
	if e := check("other"); e == nil || *e != (Exceeded{Scope: ScopeSandbox, SandboxID: "sb", Used: 110, Limit: 100}) {
		t.Fatalf("sandbox budget of 100 after 110 tokens: %+v", e)
	}
	// The sandbox's budget is reported first.
	if e := check("ses"); e == nil || e.Scope != ScopeSandbox {
		t.Fatalf("both spent: %+v", e)
	}
	if err := s.SetSandboxBudget("sb", 111); err != nil {
		t.Fatal(err)
	}
	if e := check(""); e != nil {
		t.Fatalf("a raised budget lets the next request run: %+v", e)
	}
	if err := s.SetSessionBudget("sb", "ses", 0); err != nil {
		t.Fatal(err)
	}
	if e := check("ses"); e != nil {
		t.Fatalf("a removed session budget: %+v", e)
	}
	tot, budget, err := s.SessionUsage("sb", "ses")
	if err != nil || tot != totals(1, 10, 10, 5, 5) || budget != 0 {
		t.Fatalf("session usage %+v budget %d err %v", tot, budget, err)
	}
	if err := s.SetSandboxBudget("sb", -1); err == nil {
		t.Fatal("a negative budget was accepted")
	}
}

// Everything survives closing and reopening the bbolt file: records, roll-ups, totals, budgets.
func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	s, db := openStore(t, path, Config{})
	addFixture(s)
	if err := s.SetSandboxBudget("sb1", 5000); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSessionBudget("sb1", "s1", 3330); err != nil {
		t.Fatal(err)
	}
	flush(t, s)
	before, err := s.Query(Query{})
	if err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, db, path, Config{})
	after, err := s.Query(Query{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Errorf("after reopen\n%+v\nbefore\n%+v", after, before)
	}
	tot, budget, err := s.SandboxUsage("sb1")
	if err != nil || tot != totals(4, 306, 37, 3003, 54) || budget != 5000 {
		t.Errorf("sandbox sb1 after reopen: %+v budget %d err %v", tot, budget, err)
	}
	e, err := s.Check("sb1", "s1")
	if err != nil || e == nil || e.Scope != ScopeSession || e.Used != 3380 || e.Limit != 3330 {
		t.Errorf("session s1's spent budget after reopen: %+v, %v", e, err)
	}
	recs, err := s.Records(Query{}, 0)
	if err != nil || len(recs) != 5 {
		t.Fatalf("%d records after reopen (%v), want 5", len(recs), err)
	}
	if recs[4].SandboxID != "sb2" || recs[4].Model != "gpt-x" || recs[4].Status != 200 || recs[4].Duration != time.Second {
		t.Errorf("last record after reopen: %+v", recs[4])
	}
}

// Retention keeps the newest records; totals and roll-ups keep everything, and a query whose
// Since is past the records falls back to whole hours.
func TestRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	s, db := openStore(t, path, Config{MaxRecords: 3})
	for i := range 6 { // 10:00, 10:10, ... 10:50
		s.Add(rec("sb", "ses", "m", at(0, 10, 10*i), int64(i+1), 0, 0, 0))
	}
	flush(t, s)
	s = reopen(t, s, db, path, Config{MaxRecords: 3})

	recs, err := s.Records(Query{SandboxID: "sb"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Input != 4 || recs[2].Input != 6 {
		t.Fatalf("kept %+v, want the three newest (inputs 4, 5, 6)", recs)
	}
	tot, _, err := s.SandboxUsage("sb")
	if err != nil || tot != totals(6, 21, 0, 0, 0) {
		t.Fatalf("sandbox totals %+v (%v), want all six requests", tot, err)
	}
	// 10:35 is after the newest record deleted (10:20): exact.
	r, err := s.Query(Query{Since: at(0, 10, 35)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Total != totals(2, 11, 0, 0, 0) || !r.From.Equal(at(0, 10, 35)) {
		t.Errorf("since 10:35: %+v from %v, want 2 requests, 11 tokens from 10:35", r.Total, r.From)
	}
	// 10:15 is before it: the whole hour from the roll-up, and From says so.
	r, err = s.Query(Query{Since: at(0, 10, 15)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Total != totals(6, 21, 0, 0, 0) || !r.From.Equal(at(0, 10, 0)) {
		t.Errorf("since 10:15: %+v from %v, want all 6 from 10:00", r.Total, r.From)
	}
}

func TestDeleteSession(t *testing.T) {
	s, _ := testStore(t, Config{})
	addFixture(s)
	if err := s.SetSessionBudget("sb1", "s1", 1); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession("sb1", "s1"); err != nil {
		t.Fatal(err)
	}
	// Later records for it count for the sandbox only.
	s.Add(rec("sb1", "s1", "claude-a", at(2, 0, 0), 1, 0, 0, 0))
	flush(t, s)

	tot, budget, err := s.SessionUsage("sb1", "s1")
	if err != nil || tot != (Totals{}) || budget != 0 {
		t.Errorf("deleted session: %+v budget %d (%v)", tot, budget, err)
	}
	tot, _, err = s.SandboxUsage("sb1")
	if err != nil || tot != totals(5, 307, 37, 3003, 54) {
		t.Errorf("sandbox totals %+v (%v): deleting a session gives no tokens back", tot, err)
	}
	r, err := s.Query(Query{SandboxID: "sb1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Group{
		{SandboxID: "sb1", Totals: totals(4, 306, 35, 3000, 50)},
		{SandboxID: "sb1", SessionID: "s2", Totals: totals(1, 1, 2, 3, 4)},
	}
	if !reflect.DeepEqual(r.BySession, want) {
		t.Errorf("by session %+v, want %+v", r.BySession, want)
	}
	recs, err := s.Records(Query{SessionID: "s1"}, 0)
	if err != nil || len(recs) != 0 {
		t.Errorf("records still attributed to the deleted session: %+v (%v)", recs, err)
	}
}

func TestDeleteSandbox(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandboxd.db")
	s, db := openStore(t, path, Config{})
	addFixture(s)
	if err := s.SetSandboxBudget("sb1", 7); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox("sb1"); err != nil {
		t.Fatal(err)
	}
	if e, err := s.Check("sb1", ""); e != nil || err != nil {
		t.Errorf("a deleted sandbox's budget: %+v, %v", e, err)
	}
	s.Add(rec("sb1", "s1", "claude-a", at(2, 0, 0), 1, 0, 0, 0)) // not stored
	flush(t, s)
	if err := s.SetSandboxBudget("sb1", 7); !errors.Is(err, ErrGone) {
		t.Errorf("budget on a deleted sandbox: %v", err)
	}
	s = reopen(t, s, db, path, Config{})
	r, err := s.Query(Query{})
	if err != nil {
		t.Fatal(err)
	}
	if want := totals(1, 7, 8, 9, 0); r.Total != want || len(r.BySandbox) != 1 || r.BySandbox[0].SandboxID != "sb2" {
		t.Errorf("after deleting sb1: %+v", r)
	}
	tot, budget, err := s.SandboxUsage("sb1")
	if err != nil || tot != (Totals{}) || budget != 0 {
		t.Errorf("deleted sandbox: %+v budget %d (%v)", tot, budget, err)
	}
}

func TestPrune(t *testing.T) {
	s, _ := testStore(t, Config{})
	addFixture(s)
	flush(t, s)
	err := s.Prune(func(id string) bool { return id != "sb2" },
		func(sandbox, session string) bool { return session != "s2" })
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Query(Query{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Group{
		{SandboxID: "sb1", Totals: totals(2, 6, 7, 3, 4)},
		{SandboxID: "sb1", SessionID: "s1", Totals: totals(2, 300, 30, 3000, 50)},
	}
	if !reflect.DeepEqual(r.BySession, want) {
		t.Errorf("after prune: %+v, want %+v", r.BySession, want)
	}
}

func TestLabel(t *testing.T) {
	for in, want := range map[string]string{
		"claude-sonnet-4-5":             "claude-sonnet-4-5",
		"a\x00b":                        "",
		"line\nbreak":                   "",
		"\xff":                          "",
		strings.Repeat("a", maxLabel+1): "",
	} {
		if got := Label(in); got != want {
			t.Errorf("Label(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClosed(t *testing.T) {
	s, _ := testStore(t, Config{})
	s.Close()
	s.Add(rec("sb", "", "m", at(0, 0, 0), 1, 1, 1, 1)) // must not block
	if _, err := s.Check("sb", ""); !errors.Is(err, ErrClosed) {
		t.Errorf("check after close: %v", err)
	}
	if err := s.Flush(); !errors.Is(err, ErrClosed) {
		t.Errorf("flush after close: %v", err)
	}
}
