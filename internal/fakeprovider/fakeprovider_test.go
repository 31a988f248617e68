package fakeprovider

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/testenv"
)

func TestRecording(t *testing.T) {
	s, url := newTestServer(t, Config{AnthropicKeys: []string{"sk-ant-real"}})
	post(t, url+"/anthropic/v1/messages?beta=true", map[string]string{"X-Api-Key": "sk-ant-real", "X-Claude-Code-Session-Id": "sess-1"},
		map[string]any{"model": "m", "max_tokens": 5, "messages": []any{map[string]any{"role": "user", "content": "first"}}})
	post(t, url+"/anthropic/v1/messages", map[string]string{"X-Api-Key": "hiloop-placeholder"},
		map[string]any{"model": "m", "max_tokens": 5, "messages": []any{map[string]any{"role": "user", "content": "second"}}})
	post(t, url+"/oauth/token", nil, "not json")
	if resp, _ := get(t, url+"/nowhere", nil); resp.StatusCode != 404 {
		t.Errorf("unknown path: %d, want 404", resp.StatusCode)
	}

	resp, body := get(t, url+"/_fake/requests?path=/messages", nil)
	var recs []struct {
		Time    time.Time           `json:"time"`
		Method  string              `json:"method"`
		Path    string              `json:"path"`
		Query   string              `json:"query"`
		Headers map[string][]string `json:"headers"`
		Body    json.RawMessage     `json:"body"`
		Status  int                 `json:"status"`
		Error   string              `json:"error"`
	}
	decodeStrict(t, body, &recs)
	if resp.StatusCode != 200 || len(recs) != 2 {
		t.Fatalf("GET /_fake/requests?path=/messages: %d %s", resp.StatusCode, body)
	}
	first, second := recs[0], recs[1]
	if first.Method != "POST" || first.Path != "/anthropic/v1/messages" || first.Query != "beta=true" || first.Status != 200 || first.Error != "" || first.Time.IsZero() {
		t.Errorf("first record %+v", first)
	}
	if got := first.Headers["x-api-key"]; len(got) != 1 || got[0] != "sk-ant-real" {
		t.Errorf("x-api-key recorded as %q (headers %v)", got, first.Headers)
	}
	if got := first.Headers["x-claude-code-session-id"]; len(got) != 1 || got[0] != "sess-1" {
		t.Errorf("session header recorded as %q", got)
	}
	// The body is embedded as JSON, compacted, so that scripts can match it.
	if want := `{"max_tokens":5,"messages":[{"content":"first","role":"user"}],"model":"m"}`; string(first.Body) != want {
		t.Errorf("body %s, want %s", first.Body, want)
	}
	if second.Status != 401 || second.Error != "wrong credential" {
		t.Errorf("second record %+v, want the 401 and why", second)
	}

	// A body that is not JSON is a string; every request is kept, in order.
	_, body = get(t, url+"/_fake/requests", nil)
	var all []map[string]any
	decode(t, string(body), &all)
	if len(all) != 4 || all[2]["body"] != "not json" || all[2]["status"] != float64(400) || all[3]["path"] != "/nowhere" {
		t.Errorf("all records %s", body)
	}

	for _, h := range []map[string]string{{"X-Api-Key": "k"}, {"Authorization": "Bearer k"}} {
		if resp, body := get(t, url+"/_fake/requests", h); resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET /_fake/requests with %v: %d %s, want 403", h, resp.StatusCode, body)
		}
	}

	if resp, _ := do(t, http.MethodDelete, url+"/_fake/requests", nil, nil); resp.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE /_fake/requests: %d", resp.StatusCode)
	}
	if _, body := get(t, url+"/_fake/requests", nil); strings.TrimSpace(string(body)) != "[]" {
		t.Errorf("after the reset: %s, want []", body)
	}
	if len(s.Requests()) != 0 {
		t.Errorf("Requests() after the reset: %d", len(s.Requests()))
	}
	if resp, _ := do(t, http.MethodPost, url+"/_fake/revoke", nil, nil); resp.StatusCode != http.StatusNoContent || s.RefreshToken() != "" {
		t.Errorf("POST /_fake/revoke: %d, refresh token %q", resp.StatusCode, s.RefreshToken())
	}

	// /_fake/unauthorized?n=2: the next two Responses requests get the backend's 401 for an
	// expired token, the third is answered.
	if resp, _ := do(t, http.MethodPost, url+"/_fake/unauthorized?n=2", nil, nil); resp.StatusCode != http.StatusNoContent {
		t.Errorf("POST /_fake/unauthorized: %d", resp.StatusCode)
	}
	req := map[string]any{"model": "gpt-5", "input": "hi"}
	for i, want := range []int{401, 401, 200} {
		resp, body := post(t, url+"/backend-api/codex/responses", map[string]string{"Authorization": "Bearer eyJ.x.y"}, req)
		if resp.StatusCode != want || (want == 401 && !strings.Contains(string(body), `"code":"token_expired"`)) {
			t.Errorf("request %d after /_fake/unauthorized: %d %s, want %d", i, resp.StatusCode, body, want)
		}
	}
}

func TestStartServesTLS(t *testing.T) {
	s := New(Config{})
	if err := s.Start("api.example.test"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Start(); err == nil {
		t.Error("a second Start succeeded")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CACertPEM()) {
		t.Fatal("CACertPEM holds no certificate")
	}
	for _, serverName := range []string{"", "api.example.test", "localhost"} {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName}}}
		resp, err := c.Post(s.TLSURL()+"/v1/messages", "application/json",
			strings.NewReader(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"over tls"}]}`))
		if err != nil {
			t.Fatalf("HTTPS as %q: %v", serverName, err)
		}
		var msg apiMessage
		json.NewDecoder(resp.Body).Decode(&msg)
		resp.Body.Close()
		if len(msg.Content) != 1 || *msg.Content[0].Text != "echo: over tls" {
			t.Errorf("HTTPS as %q: %+v", serverName, msg)
		}
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "other.example.test"}}}
	if _, err := c.Get(s.TLSURL() + "/v1/models"); err == nil {
		t.Error("the certificate is valid for a host it was not made for")
	}
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") {
		t.Errorf("URL() = %q", s.URL())
	}
	resp, body := get(t, s.URL()+"/v1/models", nil)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"object":"list"`) {
		t.Errorf("plain HTTP: %d %s", resp.StatusCode, body)
	}
}

func TestStreamBytes(t *testing.T) {
	_, url := newTestServer(t, Config{ChunkSize: 1000})
	_, body := post(t, url+"/v1/responses", nil, map[string]any{"model": "m", "stream": true, "input": "stream: 100000"})
	completed, names := accumulateResponses(t, readSSE(t, strings.NewReader(string(body))))
	deltas := 0
	for _, n := range names {
		if n == "response.output_text.delta" {
			deltas++
		}
	}
	if text := completed.Output[0].Content[0].Text; len(text) != 100000 || deltas != 100 {
		t.Errorf("%d bytes in %d deltas, want 100000 in 100", len(text), deltas)
	}
}

func TestSlowStreamStopsWithTheClient(t *testing.T) {
	// Deltas an hour apart: the handler must give up when the client goes, or the server's
	// Close (which waits for handlers) never returns.
	s := New(Config{ChunkDelay: time.Hour})
	hs := httptest.NewServer(s)
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/v1/messages",
		strings.NewReader(`{"model":"m","max_tokens":1,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "event: message_start\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel()
	resp.Body.Close()
	closed := make(chan struct{})
	go func() {
		hs.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-testenv.Deadline(t):
		t.Fatal("the handler kept waiting after its client left")
	}
}
