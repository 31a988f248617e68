package e2e

import (
	"compress/gzip"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
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
// Each of those lines is also appended to $WORK/NAME-requests.log after the request's path
// ("/v1/x x-api-key: VALUE"): what arrived, as the host saw it, where no answer (which the
// egress gateway scrubs of secrets) can change it. Under /reflect the headers also come back
// as header fields (reflect-NAME: VALUE); under /gzip the answer is gzip-compressed
// (Content-Encoding: gzip, whatever the request accepts); under /br it is sent as it is but
// labelled Content-Encoding: br.
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
	requests := &requestLog{path: filepath.Join(ts.Getenv("WORK"), name+"-requests.log")}
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
				if strings.HasPrefix(r.URL.Path, "/reflect") {
					w.Header().Add("Reflect-"+k, v)
				}
			}
		}
		sort.Strings(hdrs)
		lines = append(lines, hdrs...)
		requests.add(r.URL.Path, lines)
		var out io.Writer = w
		switch {
		case strings.HasPrefix(r.URL.Path, "/gzip"):
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			defer zw.Close()
			out = zw
		case strings.HasPrefix(r.URL.Path, "/br"):
			w.Header().Set("Content-Encoding", "br")
		}
		fmt.Fprintln(out, strings.Join(lines, "\n"))
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

// requestLog is a test server's $WORK/NAME-requests.log.
type requestLog struct {
	mu   sync.Mutex
	path string
}

// add appends lines, each after path.
func (l *requestLog) add(path string, lines []string) {
	var b strings.Builder
	for _, line := range lines {
		b.WriteString(path + " " + line + "\n")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		panic(err) // the server's handler: net/http logs it and the request fails
	}
	defer f.Close()
	if _, err := f.WriteString(b.String()); err != nil {
		panic(err)
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

// cmdGitServer: gitserver NAME HOST REPO serves a git repository at https://HOST/REPO (git's
// smart HTTP, through git http-backend) holding one commit that adds a README, with the
// certificate the egress gateway's CA (in $DATADIR, made if the daemon has not made it yet)
// gives HOST; it sets NAME_TLS_PORT. Run it before the daemon starts.
func cmdGitServer(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: gitserver NAME HOST REPO")
	}
	name, host, repo := args[0], args[1], args[2]
	root := ts.MkAbs(name + "-repos")
	src := ts.MkAbs(name + "-src")
	git := func(dir string, a ...string) {
		cmd := exec.Command("git", a...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=tour", "GIT_AUTHOR_EMAIL=tour@example.test",
			"GIT_COMMITTER_NAME=tour", "GIT_COMMITTER_EMAIL=tour@example.test")
		if out, err := cmd.CombinedOutput(); err != nil {
			ts.Fatalf("git %s: %v\n%s", strings.Join(a, " "), err, out)
		}
	}
	ts.Check(os.MkdirAll(src, 0o755))
	git(src, "init", "-q", "-b", "master")
	ts.Check(os.WriteFile(filepath.Join(src, "README"), []byte("Hello World!\n"), 0o644))
	git(src, "add", "README")
	git(src, "commit", "-q", "-m", "first commit")
	ts.Check(os.MkdirAll(filepath.Dir(filepath.Join(root, repo)), 0o755))
	git(root, "clone", "-q", "--bare", src, filepath.Join(root, repo))

	out, err := exec.Command("git", "--exec-path").Output()
	ts.Check(err)
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	handler := &cgi.Handler{
		Path: backend,
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	// The gateway tunnels HTTPS to a host with no secret bound to it byte for byte: the sandbox
	// checks the certificate itself, and it trusts the gateway's CA.
	ts.Check(os.MkdirAll(ts.Getenv("DATADIR"), 0o700))
	ca, err := gateway.LoadOrCreateCA(ts.Getenv("DATADIR"))
	ts.Check(err)
	leaf, err := ca.Leaf(host)
	ts.Check(err)
	srv := httptest.NewUnstartedServer(handler)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	srv.StartTLS()
	ts.Defer(srv.Close)
	ts.Setenv(name+"_TLS_PORT", strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port))
}

// cmdTCPSend: tcpsend ADDR IN OUT connects to ADDR, sends the file IN (which may be empty),
// half-closes, and writes everything it receives until the far side closes to OUT: a byte-exact
// round trip through a forward, half-close included.
func cmdTCPSend(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: tcpsend ADDR IN OUT")
	}
	in, err := os.ReadFile(ts.MkAbs(args[1]))
	ts.Check(err)
	c, err := net.Dial("tcp", args[0])
	ts.Check(err)
	defer c.Close()
	ts.Check(c.SetDeadline(time.Now().Add(time.Minute)))
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(in)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		done <- err
	}()
	out, err := io.ReadAll(c)
	ts.Check(err)
	ts.Check(<-done)
	ts.Check(os.WriteFile(ts.MkAbs(args[2]), out, 0o644))
}

// cmdResigner: resigner NAME TARGET HOST... is a TLS-inspecting proxy on the host's loopback,
// as some companies put on the way out: it answers TLS for every HOST with a certificate of a CA
// of its own (written to $WORK/NAME-ca.pem), reads the plain text and carries it over a TLS
// connection of its own to TARGET (ADDR:PORT, the real host, whose certificate it does not
// check: it is the script's own server). It sets NAME_TLS_PORT.
func cmdResigner(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: resigner NAME TARGET HOST...")
	}
	name, target, hosts := args[0], args[1], args[2:]
	ca, leaf, err := fakeprovider.Certificates(hosts)
	ts.Check(err)
	ts.Check(os.WriteFile(filepath.Join(ts.Getenv("WORK"), name+"-ca.pem"), ca, 0o644))
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{leaf}})
	ts.Check(err)
	ts.Defer(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if tc.Handshake() != nil {
					return // the client refused the proxy's certificate
				}
				up, err := tls.Dial("tcp", target, &tls.Config{ServerName: tc.ConnectionState().ServerName, InsecureSkipVerify: true})
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, tc); _ = up.CloseWrite() }()
				_, _ = io.Copy(tc, up)
			}()
		}
	}()
	ts.Setenv(name+"_TLS_PORT", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
}
