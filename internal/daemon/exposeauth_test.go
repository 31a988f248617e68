package daemon

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// exposeAuthPair serves an exposure with auth in front of backend, both real HTTP servers on
// loopback, and returns the exposure's URL, its record and its links.
func exposeAuthPair(t *testing.T, backend http.Handler) (string, store.Exposure, *exposeLinks) {
	t.Helper()
	be := httptest.NewServer(backend)
	t.Cleanup(be.Close)
	rec := store.Exposure{SandboxID: "sb1", SandboxName: "web", Port: 8000, Auth: true, Secret: newExposeSecret()}
	links := &exposeLinks{}
	front := httptest.NewServer(exposeAuthHandler(rec, links, func(ctx context.Context, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", be.Listener.Addr().String())
	}))
	t.Cleanup(front.Close)
	return front.URL, rec, links
}

// A WebSocket (a harness's web UI, a dev server's live reload) passes with the token, and its
// upgrade is refused without it.
func TestExposeAuthCarriesWebSockets(t *testing.T) {
	url, rec, _ := exposeAuthPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		typ, b, err := c.Read(r.Context())
		if err == nil {
			_ = c.Write(r.Context(), typ, append([]byte("echo: "), b...))
		}
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws := "ws" + strings.TrimPrefix(url, "http")
	if _, resp, err := websocket.Dial(ctx, ws, nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a WebSocket without the token: %v, %v; want a 401", err, resp)
	}
	h := http.Header{}
	h.Set(api.ExposeTokenHeader, exposeToken(rec, time.Now().Add(time.Hour)))
	c, _, err := websocket.Dial(ctx, ws, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	_, b, err := c.Read(ctx)
	if err != nil || string(b) != "echo: hi" {
		t.Fatalf("through the exposure: %q, %v", b, err)
	}
}

func TestExposeTokensExpireAndBindToTheirExposure(t *testing.T) {
	rec := store.Exposure{SandboxID: "sb1", Port: 8000, Auth: true, Secret: newExposeSecret()}
	now := time.Now()
	tok := exposeToken(rec, now.Add(time.Hour))
	if !validExposeToken(rec, tok, now) {
		t.Fatal("a fresh token is refused")
	}
	if validExposeToken(rec, tok, now.Add(2*time.Hour)) {
		t.Fatal("an expired token passes")
	}
	other := rec
	other.Port = 8001
	if validExposeToken(other, tok, now) {
		t.Fatal("a token opens another port of the same sandbox")
	}
	renewed := rec
	renewed.Secret = newExposeSecret()
	if validExposeToken(renewed, tok, now) {
		t.Fatal("a token outlives its exposure's secret")
	}
	// The expiry is under the MAC: a later one written in does not pass.
	parts := strings.Split(tok, ".")
	if validExposeToken(rec, "v1.99999999999."+parts[2], now) {
		t.Fatal("a token whose expiry was changed passes")
	}
}

func TestExposeLinksAreSpentOnce(t *testing.T) {
	url, _, links := exposeAuthPair(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "inside")
	}))
	tok, _ := links.mint(exposedKey("sb1", 8000), time.Now())
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(url + "/app?x=1&" + exposeLinkParam + "=" + tok)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/app?x=1" {
		t.Fatalf("the link: %d to %q; want 303 to /app?x=1", resp.StatusCode, resp.Header.Get("Location"))
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].Name != exposeCookie(0) {
		t.Fatalf("cookies %v: want one HttpOnly %s", cookies, exposeCookie(0))
	}
	again, err := client.Get(url + "/?" + exposeLinkParam + "=" + tok)
	if err != nil {
		t.Fatal(err)
	}
	again.Body.Close()
	if again.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the link used twice: %d, want 401", again.StatusCode)
	}
	req, _ := http.NewRequest("GET", url+"/", nil)
	req.AddCookie(cookies[0])
	in, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(in.Body)
	in.Body.Close()
	if in.StatusCode != http.StatusOK || string(body) != "inside" {
		t.Fatalf("with the cookie: %d %q", in.StatusCode, body)
	}
	tok2, _ := links.mint(exposedKey("sb1", 8000), time.Now())
	if links.use(exposedKey("sb2", 8000), tok2, time.Now()) {
		t.Fatal("a link of one exposure opens another")
	}
	if !links.use(exposedKey("sb1", 8000), tok2, time.Now()) {
		t.Fatal("a link tried on another exposure is spent for its own")
	}
}

// The refusals an owner reads name the sandbox as they type it: the bare name of its key.
func TestExposeAuthSaysTheOwnersName(t *testing.T) {
	be := httptest.NewServer(http.NotFoundHandler())
	be.Close() // nothing listens there now: a refused connection
	rec := store.Exposure{SandboxID: "sb1", SandboxName: "bob.web", Port: 8000, Auth: true, Secret: newExposeSecret()}
	front := httptest.NewServer(exposeAuthHandler(rec, &exposeLinks{}, func(ctx context.Context, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", be.Listener.Addr().String())
	}))
	defer front.Close()
	for _, tok := range []string{"", exposeToken(rec, time.Now().Add(time.Hour))} {
		req, _ := http.NewRequest("GET", front.URL, nil)
		if tok != "" {
			req.Header.Set(api.ExposeTokenHeader, tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "bob.web") || !strings.Contains(string(body), "web") {
			t.Errorf("token %q: %d %q names the key, not the owner's name", tok, resp.StatusCode, body)
		}
	}
}
