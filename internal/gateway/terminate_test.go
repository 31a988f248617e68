package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// Placeholders as the secrets store might make them: unique, and nothing like a value.
const (
	phKey   = "hiloop-placeholder-key-5f2b9c"
	phToken = "hiloop-placeholder-token-a81d07"
)

// secretWorld is a harness whose proxy terminates TLS for bound.example.test and web.example.test,
// with a real TLS server (its own CA, given to the proxy as UpstreamCAs) behind the routed names
// bound.example.test and free.example.test.
type secretWorld struct {
	*harness
	ca       *CA
	up       *httptest.Server
	upPool   *x509.CertPool // the upstream server's CA
	roots    *x509.CertPool // what sandbox clients trust: the gateway CA and the upstream's CA
	key      atomic.Pointer[string]
	token    atomic.Pointer[string]
	release  chan struct{} // lets /stream send its second line
	detached atomic.Bool   // Secrets answers nothing, as after detach
	bindings []Binding
	// got is what the host got in the last request it echoed, as it echoed it; the client
	// reads the echo scrubbed of the values.
	got atomic.Pointer[string]
	// answer, when set, answers requests to .../answer in place of the echo.
	answer atomic.Pointer[http.HandlerFunc]
}

// lastGot is what the host got in the last request it echoed.
func (w *secretWorld) lastGot() string {
	if s := w.got.Load(); s != nil {
		return *s
	}
	return ""
}

// answerWith makes h answer requests to .../answer.
func (w *secretWorld) answerWith(h http.HandlerFunc) { w.answer.Store(&h) }

func newSecretWorld(t *testing.T, configure func(*Proxy)) *secretWorld {
	t.Helper()
	var err error
	w := &secretWorld{release: make(chan struct{})}
	if w.ca, err = LoadOrCreateCA(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	var leaf tls.Certificate
	w.upPool, _, leaf = newCA(t)
	w.up = startUpstream(t, w, leaf)
	w.roots = w.upPool.Clone()
	w.roots.AddCert(w.ca.Certificate())
	w.harness = newHarness(t, func(p *Proxy) {
		p.Routes = append(p.Routes,
			Route{Host: "bound.example.test", Port: 443, To: serverAddr(w.up)},
			Route{Host: "free.example.test", Port: 443, To: serverAddr(w.up)},
		)
		w.configure(p)
		if configure != nil {
			configure(p)
		}
	})
	return w
}

// configure gives p the world's CA and secrets.
func (w *secretWorld) configure(p *Proxy) {
	key, token := "real-key-value", "real-token-value"
	w.key.Store(&key)
	w.token.Store(&token)
	w.bindings = []Binding{
		{Name: "api-key", Header: "X-Api-Key", Hosts: []string{"bound.example.test", "web.example.test"}, Placeholder: phKey,
			Value: func() []byte { return []byte(*w.key.Load()) }},
		{Name: "token", Header: "Authorization", Format: "Bearer {value}", PathPrefix: "/v1/", Hosts: []string{"Bound.Example.Test."},
			Placeholder: phToken, Value: func() []byte { return []byte(*w.token.Load()) }},
	}
	p.CA = w.ca
	p.UpstreamCAs = w.upPool
	// Every binding of the sandbox, whatever the host, as a store may answer.
	p.Secrets = func(string) []Binding {
		if w.detached.Load() {
			return nil
		}
		return w.bindings
	}
}

// startUpstream starts the real host: HTTP/1.1 and HTTP/2 over TLS with leaf.
func startUpstream(t testing.TB, w *secretWorld, leaf tls.Certificate) *httptest.Server {
	s := httptest.NewUnstartedServer(http.HandlerFunc(w.serveUpstream))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}}
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// serveUpstream is the real host: it tells what it got, streams, or sends bytes.
func (w *secretWorld) serveUpstream(rw http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/stream":
		rw.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(rw, "data: one\n\n")
		http.NewResponseController(rw).Flush()
		select {
		case <-w.release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(rw, "data: two\n\n")
		return
	case "/bytes":
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		rw.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			k, err := rw.Write(zeros[:min(n, len(zeros))])
			if err != nil {
				return
			}
			n -= k
		}
		return
	}
	if h := w.answer.Load(); h != nil && strings.HasSuffix(r.URL.Path, "/answer") {
		(*h)(rw, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var echo strings.Builder
	fmt.Fprintf(&echo, "host=%s sni=%s proto=%s uri=%s\n", r.Host, r.TLS.ServerName, r.Proto, r.RequestURI)
	r.Header.Write(&echo)
	fmt.Fprintf(&echo, "body=%s\n", body)
	got := echo.String()
	w.got.Store(&got)
	io.WriteString(rw, got)
}

var zeros = make([]byte, 256<<10)

// client returns an HTTP client of the sandbox trusting the gateway's CA, captured
// transparently (proxy false) or through the explicit proxy, speaking HTTP/2 if h2.
func (w *secretWorld) client(t testing.TB, proxy, h2 bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: w.roots}, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	if proxy {
		tr.Proxy = http.ProxyURL(w.url)
	} else {
		tr.DialContext = w.transparentDialer(netip.AddrPortFrom(public, 443))
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

type reply struct {
	status int
	proto  string
	issuer string // of the certificate the client was shown
	body   string
}

func (w *secretWorld) do(t testing.TB, c *http.Client, req *http.Request) reply {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	r := reply{status: resp.StatusCode, proto: resp.Proto, body: string(b)}
	if resp.TLS != nil {
		r.issuer = resp.TLS.PeerCertificates[0].Issuer.CommonName
	}
	return r
}

func newRequest(t testing.TB, method, url, body string, header ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// closeIdle makes the next request open a new connection, hence a new audit record.
func closeIdle(c *http.Client) { c.Transport.(*http.Transport).CloseIdleConnections() }

func TestTerminateInjects(t *testing.T) {
	for _, tc := range []struct {
		name      string
		proxy, h2 bool
		kind      string
	}{
		{"transparent/http1", false, false, KindTLS},
		{"transparent/h2", false, true, KindTLS},
		{"connect/http1", true, false, KindConnect},
		{"connect/h2", true, true, KindConnect},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newSecretWorld(t, nil)
			c := w.client(t, tc.proxy, tc.h2)
			r := w.do(t, c, newRequest(t, "GET", "https://bound.example.test/v1/models?q=1", "",
				"X-Api-Key", phKey, "Authorization", "Bearer "+phToken))
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			got := w.lastGot()
			wantBody(t, got, "host=bound.example.test sni=bound.example.test", "uri=/v1/models?q=1",
				"X-Api-Key: real-key-value\r\n", "Authorization: Bearer real-token-value\r\n",
				"proto=HTTP/2.0") // upstream speaks HTTP/2 when the real host offers it
			if strings.Contains(got, "placeholder") {
				t.Fatalf("a placeholder reached the host: %s", got)
			}
			// The host echoed the values; the client reads its placeholders in their place.
			wantBody(t, r.body, "X-Api-Key: "+phKey+"\r\n", "Authorization: Bearer "+phToken+"\r\n")
			if strings.Contains(r.body, "real-") {
				t.Fatalf("a value reached the client: %s", r.body)
			}
			if r.issuer != "hiloop gateway CA" {
				t.Fatalf("the client was shown a certificate issued by %q", r.issuer)
			}
			if wantProto := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[tc.h2]; r.proto != wantProto {
				t.Fatalf("client spoke %s, want %s", r.proto, wantProto)
			}
			closeIdle(c)
			rec := w.record("the terminated connection", byHost(tc.kind, "bound.example.test"))
			if !rec.Allowed || !rec.Terminated || rec.Secret != "api-key,token" || rec.Scrubbed != "api-key,token" || rec.SecretMisuse || rec.Err != "" ||
				rec.Addr != serverAddr(w.up) || rec.Port != 443 || rec.BytesUp < 200 || rec.BytesDown < 200 {
				t.Fatalf("record %+v", rec)
			}
		})
	}
}

// A placeholder anywhere but the bound header of a bound host is sent as it is, and audited.
func TestTerminateMisuse(t *testing.T) {
	w := newSecretWorld(t, nil)
	for _, tc := range []struct {
		name   string
		req    func() *http.Request
		want   []string // in what the host got
		secret string   // injected anyway (and scrubbed from the echo)
	}{
		{"another header", func() *http.Request {
			return newRequest(t, "GET", "https://bound.example.test/", "", "X-Other", phKey)
		}, []string{"X-Other: " + phKey}, ""},
		{"the URL", func() *http.Request {
			return newRequest(t, "GET", "https://bound.example.test/a?k="+phKey, "", "X-Api-Key", phKey)
		}, []string{"uri=/a?k=" + phKey, "X-Api-Key: real-key-value"}, "api-key"},
		{"the body", func() *http.Request {
			return newRequest(t, "POST", "https://bound.example.test/", "{\"k\":\""+phKey+"\"}")
		}, []string{"body={\"k\":\"" + phKey + "\"}"}, ""},
		{"outside the path prefix", func() *http.Request {
			return newRequest(t, "GET", "https://bound.example.test/v2/x", "", "Authorization", "Bearer "+phToken)
		}, []string{"Authorization: Bearer " + phToken}, ""},
		{"another authority on the bound host's connection", func() *http.Request {
			r := newRequest(t, "GET", "https://bound.example.test/", "", "X-Api-Key", phKey)
			r.Host = "free.example.test"
			return r
		}, []string{"host=free.example.test sni=bound.example.test", "X-Api-Key: " + phKey}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := w.client(t, false, true)
			r := w.do(t, c, tc.req())
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			wantBody(t, w.lastGot(), tc.want...)
			if strings.Contains(r.body, "real-") {
				t.Fatalf("a value reached the client: %s", r.body)
			}
			closeIdle(c)
			rec := w.record("the terminated connection", byHost(KindTLS, "bound.example.test"))
			if !rec.Terminated || !rec.SecretMisuse || rec.Secret != tc.secret || rec.Scrubbed != tc.secret {
				t.Fatalf("record %+v", rec)
			}
		})
	}
}

// A host no secret is bound to is tunnelled: the client meets the real host's certificate.
func TestTerminateOnlyBoundHosts(t *testing.T) {
	w := newSecretWorld(t, nil)
	for _, proxy := range []bool{false, true} {
		c := w.client(t, proxy, true)
		r := w.do(t, c, newRequest(t, "GET", "https://free.example.test/", "", "X-Api-Key", phKey))
		if r.status != 200 || r.issuer != "gateway test CA" {
			t.Fatalf("status %d, certificate by %q: %s", r.status, r.issuer, r.body)
		}
		wantBody(t, r.body, "host=free.example.test", "X-Api-Key: "+phKey)
		closeIdle(c)
		kind := map[bool]string{false: KindTLS, true: KindConnect}[proxy]
		if rec := w.record("the tunnel", byHost(kind, "free.example.test")); rec.Terminated || rec.Secret != "" || !rec.Allowed {
			t.Fatalf("record %+v", rec)
		}
	}
}

// In clear text a secret is never given, even to a bound host; its placeholder is audited.
func TestTerminatePlainHTTPGetsNoSecret(t *testing.T) {
	w := newSecretWorld(t, nil)
	for _, proxy := range []bool{false, true} {
		tr := &http.Transport{DisableKeepAlives: true}
		kind := KindHTTP
		if proxy {
			tr.Proxy, kind = http.ProxyURL(w.url), KindProxyHTTP
		} else {
			tr.DialContext = w.transparentDialer(netip.AddrPortFrom(public, 80))
		}
		r := w.do(t, &http.Client{Transport: tr}, newRequest(t, "GET", "http://web.example.test/", "", "X-Api-Key", phKey))
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		wantBody(t, r.body, "X-Api-Key: "+phKey)
		if rec := w.record("the plain request", byHost(kind, "web.example.test")); !rec.SecretMisuse || rec.Secret != "" || rec.Terminated {
			t.Fatalf("record %+v", rec)
		}
	}
}

func TestTerminateStreams(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprint("h2=", h2), func(t *testing.T) {
			w := newSecretWorld(t, nil)
			resp, err := w.client(t, false, h2).Get("https://bound.example.test/stream")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			// The second event is only sent once the first has arrived: a gateway that buffered
			// the response would hang here until the test's deadline.
			if line, err := br.ReadString('\n'); err != nil || line != "data: one\n" {
				t.Fatalf("first event %q, %v", line, err)
			}
			close(w.release)
			rest, err := io.ReadAll(br)
			if err != nil || string(rest) != "\ndata: two\n\n" {
				t.Fatalf("rest %q, %v", rest, err)
			}
		})
	}
}

// A rotated value goes out with the next request, on the same connection; a binding gone
// (detached) leaves the placeholder worthless at once.
func TestTerminateRotationAndDetach(t *testing.T) {
	w := newSecretWorld(t, nil)
	c := w.client(t, false, true)
	req := func() string {
		w.do(t, c, newRequest(t, "GET", "https://bound.example.test/", "", "X-Api-Key", phKey))
		return w.lastGot()
	}
	wantBody(t, req(), "X-Api-Key: real-key-value\r\n")
	rotated := "rotated-value"
	w.key.Store(&rotated)
	wantBody(t, req(), "X-Api-Key: rotated-value\r\n")
	w.detached.Store(true)
	wantBody(t, req(), "X-Api-Key: "+phKey+"\r\n")
	closeIdle(c)
	if rec := w.record("the connection", byHost(KindTLS, "bound.example.test")); rec.Secret != "api-key" || rec.SecretMisuse {
		t.Fatalf("record %+v", rec)
	}
}

func TestTerminateUpstreamCertificateFails(t *testing.T) {
	// api.example.test is routed to a server whose CA the gateway does not trust.
	w := newSecretWorld(t, nil)
	w.bindings[0].Hosts = append(w.bindings[0].Hosts, "api.example.test")
	c := w.client(t, false, true)
	r := w.do(t, c, newRequest(t, "GET", "https://api.example.test/", "", "X-Api-Key", phKey))
	closeIdle(c)
	if r.status != http.StatusBadGateway || r.issuer != "hiloop gateway CA" {
		t.Fatalf("status %d, certificate by %q: %s", r.status, r.issuer, r.body)
	}
	wantBody(t, r.body, "hiloop gateway: upstream: ", "certificate signed by unknown authority")
	rec := w.record("the connection", byHost(KindTLS, "api.example.test"))
	if !rec.Terminated || !strings.Contains(rec.Err, "certificate signed by unknown authority") || rec.Secret != "" {
		t.Fatalf("record %+v", rec)
	}
}

// A client that does not trust the gateway's CA fails its handshake; the record says so.
func TestTerminateUntrustingClient(t *testing.T) {
	w := newSecretWorld(t, nil)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: w.upPool}, DialContext: w.transparentDialer(netip.AddrPortFrom(public, 443))}
	if _, err := (&http.Client{Transport: tr}).Get("https://bound.example.test/"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("GET: %v", err)
	}
	if rec := w.record("the connection", byHost(KindTLS, "bound.example.test")); !strings.HasPrefix(rec.Err, "TLS with the sandbox's client: ") {
		t.Fatalf("record %+v", rec)
	}
}

func TestApplySecrets(t *testing.T) {
	val := func(s string) func() []byte { return func() []byte { return []byte(s) } }
	bs := []Binding{
		{Name: "k", Header: "X-Api-Key", Hosts: []string{"a.test"}, Placeholder: "PH1", Value: val("v1")},
		{Header: "Authorization", Format: "token {value}", PathPrefix: "/api/", Hosts: []string{"a.test", "b.test"}, Placeholder: "PH2", Value: val("v2")},
		{Name: "gone", Header: "X-Gone", Hosts: []string{"a.test"}, Placeholder: "PH3", Value: val("")},
		{Name: "crlf", Header: "X-Crlf", Hosts: []string{"a.test"}, Placeholder: "PH4", Value: val("v\r\nX-Evil: 1")},
	}
	for _, tc := range []struct {
		name, host, authority, url string
		header                     http.Header
		want                       http.Header
		injected                   string
		misuse                     bool
	}{
		{"bound header", "a.test", "a.test", "/", http.Header{"X-Api-Key": {"PH1"}}, http.Header{"X-Api-Key": {"v1"}}, "k", false},
		{"bound header's name in another case", "a.test", "a.test", "/", http.Header{"x-api-key": {"PH1"}}, http.Header{"x-api-key": {"v1"}}, "k", false},
		{"authority with port", "a.test", "a.test:443", "/", http.Header{"X-Api-Key": {"PH1"}}, http.Header{"X-Api-Key": {"v1"}}, "k", false},
		{"format exactly", "b.test", "b.test", "/api/x", http.Header{"Authorization": {"token PH2"}}, http.Header{"Authorization": {"token v2"}}, "PH2", false},
		{"format, placeholder alone", "b.test", "b.test", "/api/x", http.Header{"Authorization": {"PH2"}}, http.Header{"Authorization": {"PH2"}}, "", true},
		{"format, another scheme", "b.test", "b.test", "/api/x", http.Header{"Authorization": {"Bearer PH2"}}, http.Header{"Authorization": {"Bearer PH2"}}, "", true},
		{"format in another case", "b.test", "b.test", "/api/x", http.Header{"Authorization": {"Token PH2"}}, http.Header{"Authorization": {"Token PH2"}}, "", true},
		{"format with a space more", "b.test", "b.test", "/api/x", http.Header{"Authorization": {"token  PH2"}}, http.Header{"Authorization": {"token  PH2"}}, "", true},
		{"prefix and suffix", "a.test", "a.test", "/", http.Header{"X-Api-Key": {"pre-PH1-post"}}, http.Header{"X-Api-Key": {"pre-PH1-post"}}, "", true},
		{"prefix", "a.test", "a.test", "/", http.Header{"X-Api-Key": {"xPH1"}}, http.Header{"X-Api-Key": {"xPH1"}}, "", true},
		{"suffix", "a.test", "a.test", "/", http.Header{"X-Api-Key": {"PH1 "}}, http.Header{"X-Api-Key": {"PH1 "}}, "", true},
		{"twice in the value", "a.test", "a.test", "/", http.Header{"X-Api-Key": {"PH1PH1"}}, http.Header{"X-Api-Key": {"PH1PH1"}}, "", true},
		{"placeholder in another case", "a.test", "a.test", "/", http.Header{"X-Api-Key": {"ph1"}}, http.Header{"X-Api-Key": {"ph1"}}, "", true},
		{"two lines, both the placeholder", "a.test", "a.test", "/", http.Header{"X-Api-Key": {"PH1", "PH1"}}, http.Header{"X-Api-Key": {"PH1", "PH1"}}, "", true},
		{"two lines, one the placeholder", "a.test", "a.test", "/", http.Header{"X-Api-Key": {"mine", "PH1"}}, http.Header{"X-Api-Key": {"mine", "PH1"}}, "", true},
		{"two lines under names in two cases", "a.test", "a.test", "/", http.Header{"X-Api-Key": {"PH1"}, "x-api-key": {"mine"}},
			http.Header{"X-Api-Key": {"PH1"}, "x-api-key": {"mine"}}, "", true},
		{"other host", "b.test", "b.test", "/", http.Header{"X-Api-Key": {"PH1"}}, http.Header{"X-Api-Key": {"PH1"}}, "", true},
		{"other authority", "a.test", "b.test", "/", http.Header{"X-Api-Key": {"PH1"}}, http.Header{"X-Api-Key": {"PH1"}}, "", true},
		{"other header", "a.test", "a.test", "/", http.Header{"Cookie": {"x=PH1"}}, http.Header{"Cookie": {"x=PH1"}}, "", true},
		{"other header, exactly the placeholder", "a.test", "a.test", "/", http.Header{"X-Other": {"PH1"}, "X-Api-Key": {"PH1"}},
			http.Header{"X-Other": {"PH1"}, "X-Api-Key": {"v1"}}, "k", true},
		{"path prefix", "a.test", "a.test", "/apix", http.Header{"Authorization": {"token PH2"}}, http.Header{"Authorization": {"token PH2"}}, "", true},
		{"in the query", "a.test", "a.test", "/?q=PH2", http.Header{}, http.Header{}, "", true},
		{"in the query in another case", "a.test", "a.test", "/?q=pH2", http.Header{}, http.Header{}, "", true},
		{"value gone", "a.test", "a.test", "/", http.Header{"X-Gone": {"PH3"}}, http.Header{"X-Gone": {"PH3"}}, "", true},
		{"value breaks the header", "a.test", "a.test", "/", http.Header{"X-Crlf": {"PH4"}}, http.Header{"X-Crlf": {"PH4"}}, "", true},
		{"no placeholder", "a.test", "a.test", "/", http.Header{"X-Api-Key": {"mine"}}, http.Header{"X-Api-Key": {"mine"}}, "", false},
		{"clear text (no host)", "", "a.test", "/", http.Header{"X-Api-Key": {"PH1"}}, http.Header{"X-Api-Key": {"PH1"}}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "https://"+tc.authority+tc.url, nil)
			r.Header = tc.header
			use := applySecrets(bs, secretValues(bs, tc.host), tc.host, r)
			if got := strings.Join(use.injected, ","); got != tc.injected || use.misuse != tc.misuse {
				t.Fatalf("injected %q misuse %v, want %q %v", got, use.misuse, tc.injected, tc.misuse)
			}
			if fmt.Sprint(r.Header) != fmt.Sprint(tc.want) {
				t.Fatalf("header %v, want %v", r.Header, tc.want)
			}
		})
	}
}

// secretValues reads each value bound to the host once, and no other.
func TestSecretValuesReadOnce(t *testing.T) {
	var reads atomic.Int32
	bs := []Binding{
		{Header: "X-A", Hosts: []string{"a.test"}, Placeholder: "PH1", Value: func() []byte { reads.Add(1); return []byte("v1") }},
		{Header: "X-B", Hosts: []string{"b.test"}, Placeholder: "PH2", Value: func() []byte { t.Error("a value not bound to the host was read"); return nil }},
	}
	values := secretValues(bs, "a.test")
	if string(values[0]) != "v1" || values[1] != nil || reads.Load() != 1 {
		t.Fatalf("values %q after %d reads", values, reads.Load())
	}
}

// watchBody finds a placeholder however the body is split into reads.
func TestWatchBody(t *testing.T) {
	phs := [][]byte{[]byte("PLACEHOLDER"), []byte("XY")}
	body := "aaaaPLACEHOLDERbbbb"
	for chunk := 1; chunk <= len(body); chunk++ {
		var seen atomic.Bool
		r := watchBody(io.NopCloser(&chunkReader{s: body, n: chunk}), phs, &seen)
		got, _ := io.ReadAll(r)
		if string(got) != body || !seen.Load() {
			t.Fatalf("chunk %d: got %q, seen %v", chunk, got, seen.Load())
		}
	}
	var seen atomic.Bool
	io.ReadAll(watchBody(io.NopCloser(&chunkReader{s: "PLACEHOLDEx Y", n: 3}), phs, &seen))
	if seen.Load() {
		t.Fatal("seen in a body without it")
	}
}

type chunkReader struct {
	s string
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.s)
	r.s = r.s[n:]
	return n, nil
}

// BenchmarkTerminatedDownload measures the terminating path's throughput (bytes/s): a client
// in the sandbox downloading through a terminated connection, re-originated over TLS.
func BenchmarkTerminatedDownload(b *testing.B) {
	for _, h2 := range []bool{false, true} {
		b.Run(fmt.Sprint("h2=", h2), func(b *testing.B) {
			w := &secretWorld{}
			upCA, err := LoadOrCreateCA(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			leaf, err := upCA.Leaf("bound.example.test")
			if err != nil {
				b.Fatal(err)
			}
			up := startUpstream(b, w, *leaf)
			if w.ca, err = LoadOrCreateCA(b.TempDir()); err != nil {
				b.Fatal(err)
			}
			w.upPool = x509.NewCertPool()
			w.upPool.AddCert(upCA.Certificate())
			p := &Proxy{
				Routes:      []Route{{Host: "bound.example.test", Port: 443, To: serverAddr(up)}},
				OriginalDst: func(net.Conn) (netip.AddrPort, error) { return netip.AddrPortFrom(public, 443), nil },
				Policy:      &AddrPolicy{Local: noLocal},
			}
			w.configure(p)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go p.Serve(ln)
			b.Cleanup(func() { p.Close(); ln.Close() })
			roots := x509.NewCertPool()
			roots.AddCert(w.ca.Certificate())
			tr := &http.Transport{
				TLSClientConfig:   &tls.Config{RootCAs: roots},
				ForceAttemptHTTP2: h2,
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, "tcp", ln.Addr().String())
				},
			}
			if !h2 {
				tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			}
			b.Cleanup(tr.CloseIdleConnections)
			c := &http.Client{Transport: tr}
			const size = 64 << 20
			url := "https://bound.example.test/bytes?n=" + strconv.Itoa(size)
			buf := make([]byte, 256<<10)
			b.SetBytes(size)
			b.ResetTimer()
			for range b.N {
				resp, err := c.Do(newRequest(b, "GET", url, "", "X-Api-Key", phKey))
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.CopyBuffer(io.Discard, resp.Body, buf)
				resp.Body.Close()
				if err != nil || n != size {
					b.Fatalf("read %d bytes: %v", n, err)
				}
			}
		})
	}
}
