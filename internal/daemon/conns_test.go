package daemon

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/testenv"
)

// serveLimited serves handler on a unix socket whose listener holds at most max connections,
// as Serve does, and returns the socket's path.
func serveLimited(t *testing.T, max int, handler http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	lim := newConnLimiter(ln, max)
	srv := &http.Server{Handler: handler, ConnState: lim.connState, ReadHeaderTimeout: apiHeaderTimeout,
		ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelWarn)}
	go srv.Serve(lim)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
}

// waitClosed fails the test unless the server closes c.
func waitClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	deadline, _ := t.Deadline()
	if d := time.Now().Add(30 * time.Second); deadline.IsZero() || d.Before(deadline) {
		deadline = d
	}
	_ = c.SetReadDeadline(deadline)
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("%s: read %v, want the server to close it (EOF)", what, err)
	}
}

// A flood of connections that send nothing cannot lock an operator out: at the bound, the one
// idle the longest makes room for the new one.
func TestConnLimiterMakesRoomForAnOperator(t *testing.T) {
	sock := serveLimited(t, 4, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	var flood []net.Conn
	for range 4 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		flood = append(flood, c)
	}
	resp, err := unixClient(sock).Get("http://sandboxd/")
	if err != nil {
		t.Fatalf("a request with the listener full of idle connections: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("answer %q", body)
	}
	waitClosed(t, flood[0], "the connection idle the longest")
}

// When every connection is busy, a new one is closed at once rather than queued without bound.
func TestConnLimiterRefusesWhenAllAreBusy(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	sock := serveLimited(t, 2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
	}))
	client := unixClient(sock)
	errc := make(chan error, 2)
	for range 2 {
		go func() {
			resp, err := client.Get("http://sandboxd/")
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
	}
	for range 2 {
		select {
		case <-started:
		case <-testenv.Deadline(t):
			t.Fatal("the busy requests never started")
		}
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitClosed(t, c, "a connection beyond the bound with every connection busy")
	close(release)
	for range 2 {
		if err := <-errc; err != nil {
			t.Errorf("a busy request: %v", err)
		}
	}
	// Room again once they are done.
	resp, err := client.Get("http://sandboxd/")
	if err != nil {
		t.Fatalf("a request after the busy ones ended: %v", err)
	}
	resp.Body.Close()
}

// A body trickled in after its headers is cut off, and the connection with it.
func TestSlowBodyIsCutOff(t *testing.T) {
	old := apiBodyTimeout
	apiBodyTimeout = 300 * time.Millisecond
	t.Cleanup(func() { apiBodyTimeout = old })
	log := slog.New(slog.DiscardHandler)
	sock := serveLimited(t, 8, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v map[string]any
		if err := decodeBody(w, r, &v); err != nil {
			writeError(w, log, err)
			return
		}
		io.WriteString(w, "read")
	}))
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a body that never came: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "did not arrive within") || !resp.Close {
		t.Fatalf("answer %d %q (close %v), want 400 bad_request and the connection closed", resp.StatusCode, b, resp.Close)
	}
}
