package auditlog

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

func TestAddSinceWaitAndBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(db.Owned("internal/auditlog"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Add(api.AuditRecord{Action: api.AuditLoginAdded, Provider: api.LoginClaude}); err != nil {
		t.Fatal(err)
	}
	recs, err := l.Since(0, 0)
	if err != nil || len(recs) != 1 || recs[0].Seq != 1 || recs[0].Action != api.AuditLoginAdded || recs[0].Time.IsZero() {
		t.Fatalf("since 0: %+v %v", recs, err)
	}

	// A waiter wakes for the next record.
	got := make(chan []api.AuditRecord)
	go func() {
		recs, _ := l.Wait(context.Background(), 1, 0, time.Hour)
		got <- recs
	}()
	if err := l.Add(api.AuditRecord{Action: api.AuditLoginRemoved, Provider: api.LoginClaude}); err != nil {
		t.Fatal(err)
	}
	if recs := <-got; len(recs) != 1 || recs[0].Seq != 2 || recs[0].Action != api.AuditLoginRemoved {
		t.Fatalf("wait: %+v", recs)
	}

	// The log keeps MaxRecords, and numbering goes on across a reopen.
	err = db.Owned("internal/auditlog").Update(func(tx *store.Tx) error {
		b := tx.Bucket(bucketAudit)
		return b.SetSequence(MaxRecords + 5)
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err = Open(db.Owned("internal/auditlog"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Add(api.AuditRecord{Action: api.AuditHarnessLoginUsed}); err != nil {
		t.Fatal(err)
	}
	recs, err = l.Since(0, 0)
	if err != nil || len(recs) != 1 || recs[0].Seq != MaxRecords+6 {
		t.Fatalf("after trimming: %+v %v", recs, err)
	}
	if recs, _ := l.Since(0, 1); len(recs) != 1 {
		t.Fatalf("limit: %+v", recs)
	}
}
