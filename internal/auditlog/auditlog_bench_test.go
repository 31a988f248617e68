package auditlog

import (
	"path/filepath"
	"testing"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

func benchLog(b *testing.B) *Log {
	db, err := store.Open(filepath.Join(b.TempDir(), "db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	l, err := Open(db.Owned("internal/auditlog"))
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkAdd stores one record per transaction, as an operator's command does.
func BenchmarkAdd(b *testing.B) {
	l := benchLog(b)
	b.ReportAllocs()
	for range b.N {
		if err := l.Add(api.AuditRecord{Action: api.AuditHarnessLoginUsed, Provider: api.LoginClaude}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSince reads a page of 500 records.
func BenchmarkSince(b *testing.B) {
	l := benchLog(b)
	for range 2000 {
		if err := l.Add(api.AuditRecord{Action: api.AuditHarnessLoginUsed, Provider: api.LoginClaude}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if recs, err := l.Since(1000, 500); err != nil || len(recs) != 500 {
			b.Fatal(len(recs), err)
		}
	}
}
