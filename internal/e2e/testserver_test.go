package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/hiloop/hiloop/internal/fakeprovider"
	"github.com/hiloop/hiloop/internal/gateway"
)

// cmdTestServer starts servers on the host's loopback that a script's sandboxes reach through
// the egress gateway (with sandboxd --gateway-resolve): `testserver NAME HOST...` serves HTTPS
// with a certificate for every HOST, issued by a CA of its own written to $WORK/NAME-ca.pem, and
// plain HTTP, and sets NAME_TLS_PORT and NAME_HTTP_PORT. Both answer every request with one line
// per fact ("server NAME", "host H", "method M", "path P", then each request header, lower case,
// sorted), so scripts can assert on what arrived; GET /bytes/N answers N bytes of data instead.
// GET /drip/N answers N bytes slowly (16 KiB every 10 ms), so a transfer of a large N is still
// running when a script stops or kills something under it; GET /gate/KEY/N answers the first
// half of N bytes at once and the rest once the script runs `opengate KEY`.
// With -gateway-ca, the certificate is the one the egress gateway would mint for the first HOST,
// from the gateway CA in $DATADIR (created there if the daemon has not made it yet).
func cmdTestServer(ts *testscript.TestScript, neg bool, args []string) {
	gatewayCA := len(args) > 0 && args[0] == "-gateway-ca"
	if gatewayCA {
		args = args[1:]
	}
	if neg || len(args) < 2 {
		ts.Fatalf("usage: testserver [-gateway-ca] NAME HOST...")
	}
	name, hosts := args[0], args[1:]
	var leaf tls.Certificate
	if gatewayCA {
		ts.Check(os.MkdirAll(ts.Getenv("DATADIR"), 0o700))
		ca, err := gateway.LoadOrCreateCA(ts.Getenv("DATADIR"))
		ts.Check(err)
		l, err := ca.Leaf(hosts[0])
		ts.Check(err)
		leaf = *l
	} else {
		ca, l, err := fakeprovider.Certificates(hosts)
		ts.Check(err)
		ts.Check(os.WriteFile(filepath.Join(ts.Getenv("WORK"), name+"-ca.pem"), ca, 0o644))
		leaf = l
	}

	gates := ts.Value(gatesKey).(*gates)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if body, ok := bodyOf(r.URL.Path, gates); ok {
			body(w, r)
			return
		}
		lines := []string{"server " + name, "host " + r.Host, "method " + r.Method, "path " + r.URL.RequestURI()}
		var hdrs []string
		for k, vs := range r.Header {
			for _, v := range vs {
				hdrs = append(hdrs, strings.ToLower(k)+": "+v)
			}
		}
		sort.Strings(hdrs)
		fmt.Fprintln(w, strings.Join(append(lines, hdrs...), "\n"))
	})
	tlsSrv := httptest.NewUnstartedServer(handler)
	tlsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}}
	tlsSrv.StartTLS()
	plain := httptest.NewServer(handler)
	ts.Defer(func() {
		tlsSrv.Close()
		plain.Close()
	})
	for env, srv := range map[string]*httptest.Server{"_TLS_PORT": tlsSrv, "_HTTP_PORT": plain} {
		_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		ts.Setenv(name+env, port)
	}
}

// bodyOf is the handler of a path that asks for a body of a given size (/bytes/N, /drip/N,
// /gate/KEY/N); ok is false for any other path.
func bodyOf(path string, g *gates) (handler http.HandlerFunc, ok bool) {
	verb, rest, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	var gate <-chan struct{}
	switch verb {
	case "bytes", "drip":
	case "gate":
		var key string
		key, rest, _ = strings.Cut(rest, "/")
		gate = g.get(key)
	default:
		return nil, false
	}
	return func(w http.ResponseWriter, r *http.Request) {
		size, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || size < 0 {
			http.Error(w, fmt.Sprintf("bad size %q", rest), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", rest)
		rc := http.NewResponseController(w)
		buf := make([]byte, 64<<10)
		chunk := int64(len(buf))
		var tick <-chan time.Time
		if verb == "drip" {
			chunk = 16 << 10
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			tick = t.C
		}
		for sent := int64(0); sent < size; {
			if gate != nil && sent >= size/2 {
				_ = rc.Flush()
				select {
				case <-gate:
					gate = nil
				case <-r.Context().Done():
					return
				}
			}
			n := min(chunk, size-sent)
			if gate != nil {
				n = min(n, size/2-sent)
			}
			k, err := w.Write(buf[:n])
			if err != nil {
				return
			}
			sent += int64(k)
			if tick != nil {
				_ = rc.Flush()
				select {
				case <-tick:
				case <-r.Context().Done():
					return
				}
			}
		}
	}, true
}

// gates are a script's /gate/KEY/N gates, shut until opengate opens them.
type gates struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

const gatesKey = "gates"

// get returns the gate KEY, made shut on first use.
func (g *gates) get(key string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]chan struct{}{}
	}
	c, ok := g.m[key]
	if !ok {
		c = make(chan struct{})
		g.m[key] = c
	}
	return c
}

// cmdOpenGate: opengate KEY lets the test servers' /gate/KEY/N responses send their second half,
// now and from now on.
func cmdOpenGate(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: opengate KEY")
	}
	ts.Value(gatesKey).(*gates).open(args[0])
}

// open opens the gate KEY; opening it again changes nothing.
func (g *gates) open(key string) {
	c := g.get(key)
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-c:
	default:
		close(c)
	}
}
