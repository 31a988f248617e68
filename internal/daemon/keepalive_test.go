package daemon

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// keepAlivePair serves one WebSocket on loopback and returns the daemon's end (the accepted
// one) and the client's; pinged counts the pings the client received.
func keepAlivePair(t *testing.T, pinged *atomic.Int64) (daemonEnd, clientEnd *websocket.Conn) {
	t.Helper()
	accepted := make(chan *websocket.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- c
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool { pinged.Add(1); return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	select {
	case d := <-accepted:
		t.Cleanup(func() { d.CloseNow() })
		go readWebSocket(d) // the daemon reads its end without pause (exec's readInput): pongs land
		return d, c
	case <-ctx.Done():
		t.Fatal("the server never accepted")
	}
	return nil, nil
}

func readWebSocket(c *websocket.Conn) {
	for {
		if _, _, err := c.Reader(context.Background()); err != nil {
			return
		}
	}
}

// A client that answers every ping is never taken for gone.
func TestKeepAliveAnsweredPingsKeepTheCommand(t *testing.T) {
	var pinged atomic.Int64
	d, c := keepAlivePair(t, &pinged)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go readWebSocket(c) // the client reads without pause, as pkg/client does: pings are answered
	var killed atomic.Bool
	stop := keepAlive(ctx, d, func() { killed.Store(true) }, 50*time.Millisecond)
	defer stop()
	deadline := time.Now().Add(30 * time.Second)
	for pinged.Load() < 10 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := pinged.Load(); got < 10 {
		t.Fatalf("the client got %d pings in 30 s, want 10", got)
	}
	if killed.Load() {
		t.Fatal("a client that answered every ping had its command killed")
	}
}

// A client that stops reading (gone without closing its connection) answers no ping: after
// keepAliveMisses missed pings its command is killed.
func TestKeepAliveSilentClientIsKilledAfterMisses(t *testing.T) {
	var pinged atomic.Int64
	d, _ := keepAlivePair(t, &pinged) // nobody reads the client's end
	killed := make(chan time.Time, 1)
	start := time.Now()
	stop := keepAlive(context.Background(), d, func() { killed <- time.Now() }, 50*time.Millisecond)
	defer stop()
	select {
	case at := <-killed:
		// Each missed ping costs at least one interval, so three cannot end sooner than three
		// intervals: a kill on the first miss would come after one.
		if took := at.Sub(start); took < keepAliveMisses*50*time.Millisecond {
			t.Fatalf("killed after %v, before %d pings could be missed", took, keepAliveMisses)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a client that answered no ping was not killed")
	}
}
