package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

type echoBody struct {
	Name   string         `json:"name"`
	Nested map[string]int `json:"nested,omitempty"`
	Items  []struct {
		V int `json:"v"`
	} `json:"items,omitempty"`
}

func testServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	calls := &atomic.Int32{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	routes := []route{
		{method: "POST", pattern: "/v1/things", idempotent: true, handle: func(w http.ResponseWriter, r *http.Request) error {
			var b echoBody
			if err := decodeBody(w, r, &b); err != nil {
				return err
			}
			n := calls.Add(1)
			if b.Name == "taken" {
				return api.Errorf(api.CodeSandboxExists, "sandbox %q already exists", b.Name)
			}
			return writeJSON(w, http.StatusCreated, map[string]any{"name": b.Name, "call": n})
		}},
		{method: "POST", pattern: "/v1/things/start", noBody: true, handle: func(w http.ResponseWriter, r *http.Request) error {
			return writeJSON(w, http.StatusOK, map[string]any{})
		}},
	}
	srv := httptest.NewServer(asLocalAdmin(withVersion("test", newMux(routes, newIdempotency(st, log), log, nil)), log))
	t.Cleanup(srv.Close)
	return srv, calls
}

func post(t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	if key != "" {
		req.Header.Set(api.IdempotencyKeyHeader, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get(api.VersionHeader) != "test" {
		t.Errorf("missing version header")
	}
	return resp.StatusCode, string(b)
}

func errorCode(t *testing.T, body string) api.ErrorCode {
	t.Helper()
	var e api.ErrorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == nil {
		t.Fatalf("not an error body: %s", body)
	}
	return e.Error.Code
}

func TestIdempotencyKeyReplaysFirstAnswer(t *testing.T) {
	srv, calls := testServer(t)
	st1, b1 := post(t, srv.URL+"/v1/things", "k", `{"name":"a"}`)
	st2, b2 := post(t, srv.URL+"/v1/things", "k", `{"name":"a"}`)
	if st1 != 201 || st2 != 201 || b1 != b2 || calls.Load() != 1 {
		t.Fatalf("repeat: %d %q / %d %q, calls %d", st1, b1, st2, b2, calls.Load())
	}
	st3, b3 := post(t, srv.URL+"/v1/things", "k", `{"name":"b"}`)
	if st3 != 409 || errorCode(t, b3) != api.CodeIdempotencyKeyReused || calls.Load() != 1 {
		t.Fatalf("reuse: %d %s", st3, b3)
	}
	// The query is part of the request: ?with_snapshots=true is not the same call.
	st3, b3 = post(t, srv.URL+"/v1/things?force=true", "k", `{"name":"a"}`)
	if st3 != 409 || errorCode(t, b3) != api.CodeIdempotencyKeyReused || calls.Load() != 1 {
		t.Fatalf("reuse with another query: %d %s", st3, b3)
	}
	// Errors are answers too: the repeat gets the same error without running again.
	st4, b4 := post(t, srv.URL+"/v1/things", "k2", `{"name":"taken"}`)
	st5, b5 := post(t, srv.URL+"/v1/things", "k2", `{"name":"taken"}`)
	if st4 != 409 || b4 != b5 || st5 != 409 || calls.Load() != 2 {
		t.Fatalf("error replay: %d %s / %d %s calls %d", st4, b4, st5, b5, calls.Load())
	}
	// Without a key every call runs.
	post(t, srv.URL+"/v1/things", "", `{"name":"a"}`)
	post(t, srv.URL+"/v1/things", "", `{"name":"a"}`)
	if calls.Load() != 4 {
		t.Fatalf("calls without key: %d", calls.Load())
	}
}

func TestBadBodies(t *testing.T) {
	srv, _ := testServer(t)
	for _, tc := range []struct {
		body   string
		status int
		code   api.ErrorCode
		msg    string
	}{
		{`{"name":"a","extra":1}`, 400, api.CodeBadRequest, `unknown field \"extra\"`},
		{`{"name":`, 400, api.CodeBadRequest, "not valid JSON"},
		{`{"name":5}`, 400, api.CodeBadRequest, `field \"name\" must be a string`},
		{`{"name":"a"}{"name":"b"}`, 400, api.CodeBadRequest, "more than one JSON value"},
		// encoding/json would take these: a key matching only without case, a key given twice.
		{`{"NAME":"a"}`, 400, api.CodeBadRequest, `unknown field \"NAME\"`},
		{`{"name":"a","name":"b"}`, 400, api.CodeBadRequest, `field \"name\" more than once`},
		{`{"name":"a","nested":{"x":1,"x":2}}`, 400, api.CodeBadRequest, `field \"nested.x\" more than once`},
		{`{"name":"a","items":[{"v":1},{"V":2}]}`, 400, api.CodeBadRequest, `unknown field \"items[1].V\"`},
		{`{"name":"` + strings.Repeat("x", api.MaxBodyBytes) + `"}`, 413, api.CodeBodyTooLarge, "larger than"},
	} {
		for _, key := range []string{"", fmt.Sprintf("key-%.40q", tc.body)} {
			status, body := post(t, srv.URL+"/v1/things", key, tc.body)
			if status != tc.status || errorCode(t, body) != tc.code || !strings.Contains(body, tc.msg) {
				t.Errorf("body %.40q key %q: %d %s", tc.body, key, status, body)
			}
		}
	}
}

// What a request must not carry whatever its body: a query parameter or an Idempotency-Key
// given twice, a body where the route takes none.
func TestRequestShape(t *testing.T) {
	srv, calls := testServer(t)
	do := func(method, path, body string, header http.Header) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		maps.Copy(req.Header, header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		method, path, body string
		header             http.Header
		msg                string
	}{
		{"POST", "/v1/things?force=1&force=2", `{"name":"a"}`, nil, `query parameter \"force\" is given 2 times`},
		{"POST", "/v1/things", `{"name":"a"}`, http.Header{api.IdempotencyKeyHeader: {"a", "b"}}, "Idempotency-Key is given 2 times"},
		{"POST", "/v1/things/start", `{"name":"a"}`, nil, "takes no request body"},
	} {
		status, body := do(tc.method, tc.path, tc.body, tc.header)
		if status != 400 || errorCode(t, body) != api.CodeBadRequest || !strings.Contains(body, tc.msg) {
			t.Errorf("%s %s: %d %s, want 400 bad_request with %q", tc.method, tc.path, status, body, tc.msg)
		}
	}
	if calls.Load() != 0 {
		t.Errorf("%d calls ran despite their refusal", calls.Load())
	}
	if status, body := do("POST", "/v1/things/start", "", nil); status != 200 {
		t.Errorf("POST /v1/things/start without a body: %d %s", status, body)
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	srv, _ := testServer(t)
	resp, err := http.Get(srv.URL + "/v1/things")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 405 || errorCode(t, string(b)) != api.CodeMethodNotAllowed {
		t.Errorf("GET: %d %s", resp.StatusCode, b)
	}
	resp, err = http.Get(srv.URL + "/v1/nothing")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || errorCode(t, string(b)) != api.CodeNotFound {
		t.Errorf("unknown: %d %s", resp.StatusCode, b)
	}
}

// Keys are forgotten by the lock table once their requests are done, so a daemon that sees a
// fresh key on every call does not grow.
func TestIdempotencyLocksAreReleased(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	idem := newIdempotency(st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	unlock := idem.lock("k")
	if len(idem.busy) != 1 {
		t.Fatalf("busy while held: %d", len(idem.busy))
	}
	unlock()
	if len(idem.busy) != 0 {
		t.Fatalf("busy after release: %d", len(idem.busy))
	}
}

// The call a handler is given (store.Call, which the records it makes carry) is the same for a
// retry of a request with its key, whose first answer left no receipt (a server fault, here; a
// crash, in life), and another for another key or another request; a request without a key
// has none.
func TestIdempotencyGivesHandlersTheCall(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	routes := []route{{method: "POST", pattern: "/v1/things", idempotent: true, handle: func(w http.ResponseWriter, r *http.Request) error {
		return api.Errorf(api.CodeUnavailable, "call %q", store.CallOf(r.Context()))
	}}}
	srv := httptest.NewServer(asLocalAdmin(withVersion("test", newMux(routes, newIdempotency(st, log), log, nil)), log))
	t.Cleanup(srv.Close)
	callOf := func(key, body string) string {
		t.Helper()
		_, b := post(t, srv.URL+"/v1/things", key, body)
		var e api.ErrorBody
		if err := json.Unmarshal([]byte(b), &e); err != nil || e.Error == nil {
			t.Fatalf("not an error body: %s", b)
		}
		return e.Error.Message
	}
	first := callOf("k", `{"name":"a"}`)
	if first == `call ""` {
		t.Fatal("a request with a key was given no call")
	}
	if again := callOf("k", `{"name":"a"}`); again != first {
		t.Errorf("the retry was given %s, the first try %s", again, first)
	}
	for _, other := range [][2]string{{"k2", `{"name":"a"}`}, {"k", `{"name":"b"}`}} {
		if got := callOf(other[0], other[1]); got == first {
			t.Errorf("key %s with %s was given the call of key k with name a", other[0], other[1])
		}
	}
	if got := callOf("", `{"name":"a"}`); got != `call ""` {
		t.Errorf("a request without a key was given %s", got)
	}
}

// Idempotency keys are each namespace's own: bob's key is not the admin's, so his request is
// served, not answered with the admin's receipt, and the admin's replay is still the admin's.
func TestIdempotencyKeysPerNamespace(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	routes := []route{{method: "POST", pattern: "/v1/things", idempotent: true, handle: func(w http.ResponseWriter, r *http.Request) error {
		return writeJSON(w, http.StatusCreated, map[string]string{"by": principal(r).Namespace()})
	}}}
	srv := httptest.NewServer(asTestUser(newMux(routes, newIdempotency(st, log), log, nil)))
	t.Cleanup(srv.Close)
	send := func(user string) string {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/things", strings.NewReader("{}"))
		req.Header.Set(api.IdempotencyKeyHeader, "k1")
		req.Header.Set("Test-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b))
	}
	for _, tc := range []struct{ user, want string }{
		{"admin", `{"by":"admin"}`},
		{"bob", `{"by":"bob"}`},
		{"admin", `{"by":"admin"}`},
		{"bob", `{"by":"bob"}`},
	} {
		if got := send(tc.user); got != tc.want {
			t.Errorf("%s with key k1: %s, want %s", tc.user, got, tc.want)
		}
	}
}
