package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// fakeRoute stands in for internal/modelroute: it handles /anthropic/ and answers by path.
type fakeRoute struct{}

func (fakeRoute) Handles(path string) bool { return strings.HasPrefix(path, "/anthropic/") }

func (fakeRoute) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	switch r.URL.Path {
	case "/anthropic/ok":
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: streamed\n\n")
		http.NewResponseController(w).Flush()
		io.WriteString(w, "data: more\n\n")
	case "/anthropic/token":
		w.Header().Set("X-Hiloop-Error", "wrong_audience")
		w.WriteHeader(http.StatusForbidden)
	case "/anthropic/budget":
		w.Header().Set("X-Hiloop-Error", "budget_exceeded")
		w.WriteHeader(http.StatusTooManyRequests)
	case "/anthropic/upstream":
		w.WriteHeader(http.StatusInternalServerError)
	}
}

// Origin-form requests to the proxy's own address under the route's prefixes go to the model
// route, streamed, and each is audited: refused only when the route refused the token.
func TestModelRouteServedAndAudited(t *testing.T) {
	h := newHarness(t, func(p *Proxy) { p.ModelRoute = fakeRoute{} })
	for _, c := range []struct {
		path    string
		status  int
		body    string
		allowed bool
		err     string
	}{
		{"/anthropic/ok", 200, "data: streamed\n\ndata: more\n\n", true, ""},
		{"/anthropic/token", 403, "", false, "wrong_audience"},
		{"/anthropic/budget", 429, "", true, "budget_exceeded"},
		{"/anthropic/upstream", 500, "", true, "upstream answered 500 Internal Server Error"},
	} {
		resp, err := http.Post("http://"+h.addr+c.path, "application/json", strings.NewReader(`{"model":"m"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || string(body) != c.body {
			t.Errorf("%s: %d %q", c.path, resp.StatusCode, body)
		}
		rec := h.record(c.path, func(r Record) bool { return r.Kind == KindModelRoute })
		if rec.Host != "anthropic" || rec.Allowed != c.allowed || rec.Err != c.err || rec.BytesUp != int64(len(`{"model":"m"}`)) || rec.BytesDown != int64(len(c.body)) {
			t.Errorf("%s: record %+v", c.path, rec)
		}
	}
	// Another origin-form path is not the route's.
	resp, err := http.Get("http://" + h.addr + "/openai/v1/responses")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a path the route does not handle: %d", resp.StatusCode)
	}
}
