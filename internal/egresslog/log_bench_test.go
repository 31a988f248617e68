package egresslog

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/store"
)

func benchLog(b *testing.B) *Log {
	db, err := store.Open(filepath.Join(b.TempDir(), "db"))
	if err != nil {
		b.Fatal(err)
	}
	l, err := Open(db.Owned("internal/egresslog"), Config{MaxRecords: 1 << 30}) // nothing trimmed: every record is counted
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		l.Close()
		db.Close()
	})
	return l
}

// BenchmarkAddStored is the gateway's hot path: records added by several sandboxes at once,
// timed until the writer has stored them all.
func BenchmarkAddStored(b *testing.B) {
	l := benchLog(b)
	const sandboxes = 4
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		l.Add(fmt.Sprintf("sb%d", i%sandboxes), record(i))
	}
	for s := range sandboxes {
		want := uint64(b.N / sandboxes)
		if s < b.N%sandboxes {
			want++
		}
		// A record of kind dropped stands for the records the full queue lost.
		for after, got := uint64(0), uint64(0); got < want; {
			recs, err := l.Wait(context.Background(), fmt.Sprintf("sb%d", s), after, 0, time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range recs {
				after = r.Seq
				got += max(r.Dropped, 1)
			}
		}
	}
}

// BenchmarkSince reads a page of 500 stored records, as the API's list does.
func BenchmarkSince(b *testing.B) {
	l := benchLog(b)
	for i := range 2000 {
		l.Add("sb", record(i))
	}
	for after := uint64(0); after < 2000; {
		recs, err := l.Wait(context.Background(), "sb", after, 0, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if len(recs) > 0 {
			after = recs[len(recs)-1].Seq
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if recs, err := l.Since("sb", 1000, 500); err != nil || len(recs) != 500 {
			b.Fatal(len(recs), err)
		}
	}
}
