package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
)

// fakeEgressLog serves GET /v1/sandboxes/box/egress/log from memory, long poll included.
type fakeEgressLog struct {
	mu      sync.Mutex
	recs    []api.EgressRecord
	deleted bool
	wake    chan struct{}
	queries []string
}

func newFakeEgressLog() *fakeEgressLog { return &fakeEgressLog{wake: make(chan struct{})} }

func (f *fakeEgressLog) add(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		seq := uint64(len(f.recs) + 1)
		f.recs = append(f.recs, api.EgressRecord{Seq: seq, Kind: "tls", Host: "h" + strconv.FormatUint(seq, 10), Port: 443})
	}
	close(f.wake)
	f.wake = make(chan struct{})
}

func (f *fakeEgressLog) delete() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = true
	close(f.wake)
	f.wake = make(chan struct{})
}

func (f *fakeEgressLog) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/box/egress/log", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		after, _ := strconv.ParseUint(q.Get("after"), 10, 64)
		wait, _ := strconv.Atoi(q.Get("wait"))
		limit := api.MaxEgressLogPage
		if q.Has("limit") {
			limit, _ = strconv.Atoi(q.Get("limit"))
		}
		deadline := time.After(time.Duration(wait) * time.Second)
		for {
			f.mu.Lock()
			f.queries = append(f.queries, r.URL.RawQuery)
			if f.deleted {
				f.mu.Unlock()
				w.WriteHeader(http.StatusNotFound)
				json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Errorf(api.CodeSandboxNotFound, "no sandbox named box")})
				return
			}
			out := []api.EgressRecord{}
			for _, rec := range f.recs {
				if rec.Seq > after && len(out) < limit {
					out = append(out, rec)
				}
			}
			wake := f.wake
			f.mu.Unlock()
			if len(out) > 0 || wait == 0 {
				json.NewEncoder(w).Encode(api.EgressRecordList{Records: out})
				return
			}
			select {
			case <-wake:
			case <-deadline:
				json.NewEncoder(w).Encode(api.EgressRecordList{Records: out})
				return
			case <-r.Context().Done():
				return
			}
		}
	})
	return mux
}

func TestEgressLogPage(t *testing.T) {
	f := newFakeEgressLog()
	f.add(5)
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	c, _ := New(srv.URL, "")
	recs, err := c.EgressLog(context.Background(), "box", 2, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Seq != 3 || recs[1].Host != "h4" {
		t.Fatalf("page %+v", recs)
	}
	if _, err := c.EgressLog(context.Background(), "box", 0, 0, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.queries[0] != "after=2&limit=2" || f.queries[1] != "after=0&wait=3" {
		t.Fatalf("queries %q", f.queries)
	}
}

// FollowEgressLog shows stored records, then new ones, once each and in order, across a daemon
// restart, and ends with sandbox_not_found once the sandbox is deleted.
func TestFollowEgressLogSurvivesRestartUntilDeleted(t *testing.T) {
	f := newFakeEgressLog()
	f.add(3)
	sock := filepath.Join(t.TempDir(), "d.sock")
	start := func() *httptest.Server { return serveUnix(t, sock, f.handler()) }
	srv := start()
	c, err := New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan uint64, 100)
	lost := make(chan error, 10)
	done := make(chan error, 1)
	go func() {
		done <- c.FollowEgressLog(context.Background(), "box", 1, func(r api.EgressRecord) error {
			seen <- r.Seq
			return nil
		}, OnStreamLost(func(err error) { lost <- err }))
	}()
	var got []uint64
	next := func() {
		t.Helper()
		select {
		case s := <-seen:
			got = append(got, s)
		case err := <-done:
			t.Fatalf("follow ended: %v after %v", err, got)
		case <-time.After(time.Minute):
			t.Fatalf("no record after %v", got)
		}
	}
	next()
	next()
	f.add(1)
	next()

	srv.CloseClientConnections()
	srv.Close()
	os.Remove(sock)
	select {
	case <-lost:
	case <-time.After(time.Minute):
		t.Fatal("the lost daemon was not reported")
	}
	f.add(2)
	srv = start()
	defer srv.Close()
	next()
	next()
	for i, s := range got {
		if s != uint64(i+2) {
			t.Fatalf("seqs %v, want 2 to 6 once each", got)
		}
	}
	f.delete()
	select {
	case err := <-done:
		var apiErr *api.Error
		if !errors.As(err, &apiErr) || apiErr.Code != api.CodeSandboxNotFound {
			t.Fatalf("follow of a deleted sandbox ended with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("follow did not end when the sandbox was deleted")
	}
}

func TestFollowEgressLogStops(t *testing.T) {
	f := newFakeEgressLog()
	f.add(3)
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	c, _ := New(srv.URL, "")
	n := 0
	err := c.FollowEgressLog(context.Background(), "box", 0, func(api.EgressRecord) error {
		n++
		if n == 2 {
			return ErrStopStream
		}
		return nil
	})
	if err != nil || n != 2 {
		t.Fatalf("stop: %v after %d", err, n)
	}
	// An unreachable daemon on the first request is an error, not a retry.
	c, _ = New("unix://"+filepath.Join(t.TempDir(), "none.sock"), "")
	var unreachable *UnreachableError
	if err := c.FollowEgressLog(context.Background(), "box", 0, func(api.EgressRecord) error { return nil }); !errors.As(err, &unreachable) {
		t.Fatalf("unreachable daemon: %v", err)
	}
}
