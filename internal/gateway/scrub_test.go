package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"
)

// testScrubber scrubs the values of pairs (value, placeholder, ...), each labelled by its
// placeholder.
func testScrubber(t testing.TB, pairs ...string) *scrubber {
	t.Helper()
	var bs []Binding
	var values [][]byte
	for i := 0; i+1 < len(pairs); i += 2 {
		bs = append(bs, Binding{Placeholder: pairs[i+1]})
		values = append(values, []byte(pairs[i]))
	}
	s := newScrubber(bs, values)
	if s == nil {
		t.Fatal("no scrubber")
	}
	return s
}

// scrubAll reads body through s's body scrubber, the host's reads cut as split says.
func scrubAll(t testing.TB, s *scrubber, src io.Reader) string {
	t.Helper()
	b := newScrubBody(io.NopCloser(src), s, &http.Response{})
	defer b.Close()
	out, err := io.ReadAll(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// splitReader answers its reads with parts, one each.
type splitReader struct{ parts []string }

func (r *splitReader) Read(p []byte) (int, error) {
	for len(r.parts) > 0 && r.parts[0] == "" {
		r.parts = r.parts[1:]
	}
	if len(r.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.parts[0])
	r.parts[0] = r.parts[0][n:]
	return n, nil
}

// A body is scrubbed the same whatever its reads are: cut in two at every place, in three at
// every pair of places, and in reads of every size.
func TestScrubBodyEverySplit(t *testing.T) {
	s := testScrubber(t, "sk-VALUE-1", "PH-ONE", "tok2", "PH-TWO-LONGER-THAN-ITS-VALUE", "abcdef", "PH-ABC", "cd", "PH-CD")
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"nothing here", "nothing here"},
		{"sk-VALUE-1", "PH-ONE"},
		{"a sk-VALUE-1 b tok2 c", "a PH-ONE b PH-TWO-LONGER-THAN-ITS-VALUE c"},
		{"sk-VALUE-1sk-VALUE-1tok2tok2", "PH-ONEPH-ONEPH-TWO-LONGER-THAN-ITS-VALUEPH-TWO-LONGER-THAN-ITS-VALUE"},
		{"sk-VALUE-sk-VALUE-1", "sk-VALUE-PH-ONE"},                               // a false start, then the value
		{"sk-sk-VALUE-1tok", "sk-PH-ONEtok"},                                     // a prefix left at the end
		{"xxabcdefyy", "xxPH-ABCyy"},                                             // the longer of two values starting at one place...
		{"xxabcdyy", "xxabPH-CDyy"},                                              // ...and the shorter inside an unfinished longer one
		{"abcdabcdef", "abPH-CDPH-ABC"},                                          // leftmost first
		{"Bearer sk-VALUE-1\r\n", "Bearer PH-ONE\r\n"},                           // a formatted value holds the raw one
		{"sk-VALUE-2 SK-VALUE-1 sk-value-1", "sk-VALUE-2 SK-VALUE-1 sk-value-1"}, // only the exact bytes
	} {
		everySplit(t, s, tc.in, tc.want)
	}
}

// Of two values starting at one place, the longer is replaced, whatever the reads.
func TestScrubBodyLongestFirst(t *testing.T) {
	s := testScrubber(t, "tok", "PH-SHORT", "tok-longer", "PH-LONG")
	everySplit(t, s, "a tok-longer b tok c tok-long", "a PH-LONG b PH-SHORT c PH-SHORT-long")
	s = testScrubber(t, "tok-longer", "PH-LONG", "tok", "PH-SHORT")
	everySplit(t, s, "a tok-longer b tok c tok-long", "a PH-LONG b PH-SHORT c PH-SHORT-long")
}

// everySplit checks that s scrubs in to want read whole, cut in two at every place, in three
// at every pair of places, and in reads of every size.
func everySplit(t *testing.T, s *scrubber, in, want string) {
	t.Helper()
	check := func(how string, parts ...string) {
		t.Helper()
		if got := scrubAll(t, s, &splitReader{parts: parts}); got != want {
			t.Fatalf("%q read %s: got %q, want %q", in, how, got, want)
		}
	}
	check("whole", in)
	for i := 0; i <= len(in); i++ {
		check(fmt.Sprintf("cut at %d", i), in[:i], in[i:])
		for j := i; j <= len(in); j++ {
			check(fmt.Sprintf("cut at %d and %d", i, j), in[:i], in[i:j], in[j:])
		}
	}
	for n := 1; n <= len(in); n++ {
		check(fmt.Sprintf("in reads of %d", n), chunks(in, n)...)
	}
}

func chunks(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

// The scrubber holds back only what could be the start of a value: the rest of a read is handed
// on at once, so an event stream never waits for bytes it does not need.
func TestScrubBodyHoldsOnlyAPrefix(t *testing.T) {
	s := testScrubber(t, "sk-VALUE-1", "PH-ONE")
	for _, tc := range []struct{ read, first string }{
		{"data: one\n\n", "data: one\n\n"},
		{"data: sk-VALUE-1\n\n", "data: PH-ONE\n\n"},
		{"data: sk-VAL", "data: "},
		{"data: s", "data: "},
		{"data: sk-VALUE-", "data: "},
		{"data: sk-VALUE-1", "data: PH-ONE"},
		{"sk-VALUE-1 sk", "PH-ONE "},
		{"ssss", "sss"},
	} {
		r := &gatedReader{first: tc.read, rest: make(chan string, 1)}
		b := newScrubBody(io.NopCloser(r), s, &http.Response{})
		buf := make([]byte, 64)
		n, err := b.Read(buf)
		if err != nil || string(buf[:n]) != tc.first {
			t.Fatalf("after %q: first read %q, %v; want %q", tc.read, buf[:n], err, tc.first)
		}
		b.Close()
	}
}

// gatedReader answers first, then blocks until rest has something: a host that paused.
type gatedReader struct {
	first string
	rest  chan string
}

func (r *gatedReader) Read(p []byte) (int, error) {
	if r.first != "" {
		n := copy(p, r.first)
		r.first = r.first[n:]
		return n, nil
	}
	s, ok := <-r.rest
	if !ok {
		return 0, io.EOF
	}
	return copy(p, s), nil
}

// A body cut off by an error does not hand on its held tail: it may be the start of a value.
func TestScrubBodyErrorDropsTheTail(t *testing.T) {
	s := testScrubber(t, "sk-VALUE-1", "PH-ONE")
	broken := errors.New("broken")
	b := newScrubBody(io.NopCloser(io.MultiReader(strings.NewReader("ok sk-VAL"), &errReader{broken})), s, &http.Response{})
	got, err := io.ReadAll(b)
	if !errors.Is(err, broken) || string(got) != "ok " {
		t.Fatalf("got %q, %v", got, err)
	}
}

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }

func TestScrubHeader(t *testing.T) {
	s := testScrubber(t, "sk-VALUE-1", "PH-ONE", "tok2", "PH-TWO")
	h := http.Header{
		"X-Echo":           {"Bearer sk-VALUE-1", "fine", "tok2tok2"},
		"Www-Authenticate": {`Bearer error="invalid_token", token="sk-VALUE-1"`},
		"X-Sk-VALUE-1":     {"named"},
		"Location":         {"https://a.test/?k=sk-VALUE-1"},
		"Content-Type":     {"text/plain"},
	}
	s.header(h)
	want := http.Header{
		"X-Echo":           {"Bearer PH-ONE", "fine", "PH-TWOPH-TWO"},
		"Www-Authenticate": {`Bearer error="invalid_token", token="PH-ONE"`},
		"X-PH-ONE":         {"named"},
		"Location":         {"https://a.test/?k=PH-ONE"},
		"Content-Type":     {"text/plain"},
	}
	if fmt.Sprint(h) != fmt.Sprint(want) {
		t.Fatalf("header %v\nwant %v", h, want)
	}
	if got := strings.Join(s.scrubbed(), ","); got != "PH-ONE,PH-TWO" {
		t.Fatalf("scrubbed %q", got)
	}
	// Nothing to replace: nothing allocated.
	clean := http.Header{"Content-Type": {"text/plain"}, "X-A": {"a", "b"}}
	if n := testing.AllocsPerRun(100, func() { s.header(clean) }); n != 0 {
		t.Fatalf("%v allocations scrubbing a header without values", n)
	}
}

func TestScrubberOnlyWithValues(t *testing.T) {
	bs := []Binding{{Placeholder: "PH1"}, {Placeholder: "PH2"}, {}}
	if s := newScrubber(bs, [][]byte{nil, {}, []byte("v")}); s != nil {
		t.Fatalf("a scrubber of %d values, none of them a bound value with a placeholder", len(s.pairs))
	}
}

func TestContentCoding(t *testing.T) {
	for _, tc := range []struct {
		header []string
		want   string
		err    bool
	}{
		{nil, "", false},
		{[]string{"identity"}, "", false},
		{[]string{"gzip"}, "gzip", false},
		{[]string{" GZip "}, "gzip", false},
		{[]string{"x-gzip"}, "gzip", false},
		{[]string{"identity, gzip"}, "gzip", false},
		{[]string{"br"}, "", true},
		{[]string{"zstd"}, "", true},
		{[]string{"deflate"}, "", true},
		{[]string{"gzip, br"}, "", true},
		{[]string{"gzip", "gzip"}, "", true},
		{[]string{"made-up"}, "", true},
	} {
		got, err := contentCoding(http.Header{"Content-Encoding": tc.header})
		var u *unscrubbable
		if got != tc.want || (err != nil) != tc.err || err != nil && !errors.As(err, &u) {
			t.Errorf("Content-Encoding %q: %q, %v", tc.header, got, err)
		}
	}
}

func TestScrubAcceptEncoding(t *testing.T) {
	for _, tc := range []struct {
		client []string
		want   string
	}{
		{nil, "identity"},
		{[]string{"gzip"}, "gzip"},
		{[]string{"br, gzip;q=0.8, zstd"}, "gzip"},
		{[]string{"deflate, br", "zstd"}, "identity"},
		{[]string{"br", "GZIP"}, "gzip"},
		{[]string{"*"}, "gzip"},
		{[]string{"gzip;q=0"}, "identity"},
		{[]string{"gzip; q=0.000, br"}, "identity"},
		{[]string{"gzip;q=0, *"}, "identity"},
		{[]string{"*;q=0"}, "identity"},
		{[]string{"x-gzip;q=0.5"}, "gzip"},
		{[]string{"identity"}, "identity"},
	} {
		if got := scrubAcceptEncoding(tc.client); got != tc.want {
			t.Errorf("Accept-Encoding %q: %q, want %q", tc.client, got, tc.want)
		}
	}
}

// response sets an answer to be scrubbed: its header fields at once, its body (decompressed
// from gzip) and trailers as they are read; the lengths it can no longer vouch for go.
func TestScrubResponse(t *testing.T) {
	s := testScrubber(t, "sk-VALUE-1", "PH-ONE")
	gz := func(text string) string {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		io.WriteString(zw, text)
		zw.Close()
		return b.String()
	}
	for _, tc := range []struct {
		name     string
		method   string
		header   http.Header
		body     string
		want     string
		wantHead http.Header
		err      bool
	}{
		{"identity", "GET", http.Header{"Content-Length": {"21"}, "X-Echo": {"sk-VALUE-1"}, "Etag": {`"e"`}}, "key: sk-VALUE-1 ok", "key: PH-ONE ok",
			http.Header{"X-Echo": {"PH-ONE"}, "Etag": {`"e"`}}, false},
		{"gzip", "GET", http.Header{"Content-Encoding": {"gzip"}, "Content-Length": {"40"}, "Etag": {`"e"`}}, gz("key: sk-VALUE-1 ok"), "key: PH-ONE ok",
			http.Header{"Etag": {`W/"e"`}}, false},
		{"gzip, weak already", "GET", http.Header{"Content-Encoding": {"x-gzip"}, "Etag": {`W/"e"`}}, gz("sk-VALUE-1"), "PH-ONE",
			http.Header{"Etag": {`W/"e"`}}, false},
		{"gzip, empty", "GET", http.Header{"Content-Encoding": {"gzip"}}, "", "", http.Header{}, false},
		{"gzip, HEAD", "HEAD", http.Header{"Content-Encoding": {"gzip"}, "Content-Length": {"40"}}, "", "", http.Header{}, false},
		{"br", "GET", http.Header{"Content-Encoding": {"br"}}, "anything", "", nil, true},
		{"br, HEAD: no body to scrub", "HEAD", http.Header{"Content-Encoding": {"br"}, "X-Echo": {"sk-VALUE-1"}}, "", "",
			http.Header{"Content-Encoding": {"br"}, "X-Echo": {"PH-ONE"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{
				StatusCode: 200, Header: tc.header, ContentLength: int64(len(tc.body)),
				Body:    io.NopCloser(strings.NewReader(tc.body)),
				Trailer: http.Header{"X-Trailer": nil},
				Request: httptest.NewRequest(tc.method, "https://a.test/", nil),
			}
			if tc.body == "" {
				resp.Body = http.NoBody
			}
			err := s.response(resp)
			var u *unscrubbable
			if tc.err {
				if !errors.As(err, &u) {
					t.Fatalf("error %v, want the answer refused", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.ContentLength != -1 || fmt.Sprint(resp.Header) != fmt.Sprint(tc.wantHead) {
				t.Fatalf("length %d, header %v; want -1, %v", resp.ContentLength, resp.Header, tc.wantHead)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || string(got) != tc.want {
				t.Fatalf("body %q, %v; want %q", got, err, tc.want)
			}
			// The transport fills the trailers once the body is read; Close scrubs them.
			resp.Trailer.Set("X-Trailer", "Bearer sk-VALUE-1")
			resp.Body.Close()
			if tc.body != "" && resp.Trailer.Get("X-Trailer") != "Bearer PH-ONE" {
				t.Fatalf("trailer %v", resp.Trailer)
			}
		})
	}
	// A switch of protocols hands on bytes nobody can scrub.
	resp := &http.Response{StatusCode: http.StatusSwitchingProtocols, Header: http.Header{"Upgrade": {"websocket"}},
		Body: io.NopCloser(strings.NewReader("")), Request: httptest.NewRequest("GET", "https://a.test/", nil)}
	var u *unscrubbable
	if err := s.response(resp); !errors.As(err, &u) || !strings.Contains(err.Error(), `"websocket"`) {
		t.Fatalf("101: %v", err)
	}
}

// FuzzScrub feeds a host's bytes, cut into reads as the fuzzer likes, through the body
// scrubber of two fixed values and one the fuzzer picks. Whatever the bytes and the cuts: the
// same output as one read of the whole body, and neither fixed value left in it (no
// placeholder can make one with the bytes around it).
func FuzzScrub(f *testing.F) {
	f.Add([]byte("data: sk-VALUE-1\n\n"), []byte{3, 7}, []byte("x"))
	f.Add([]byte("Bearer tok-22 tok-2 sk-VALUE-1sk-VALUE-1"), []byte{1}, []byte("tok-2"))
	f.Add([]byte("sk-sk-VALUE-1-sk-VALUE"), []byte{0, 1, 2, 200}, []byte("VALUE"))
	f.Add([]byte("xxsk-VALUE-1yy"), []byte{4}, []byte("xsk-VALUE-1yy"))
	f.Add([]byte{}, []byte{}, []byte{})
	f.Add(bytes.Repeat([]byte("s"), 300), []byte{255, 17}, []byte("ss"))
	f.Fuzz(func(t *testing.T, body, cuts, value []byte) {
		pairs := []string{"sk-VALUE-1", "PH-ONE", "tok-22", "PH-TWO"}
		if len(value) > 0 && len(value) <= 64 {
			pairs = append(pairs, string(value), "PH-THREE")
		}
		s := testScrubber(t, pairs...)
		var parts []string
		rest := string(body)
		for _, c := range cuts {
			n := min(int(c), len(rest))
			parts = append(parts, rest[:n])
			rest = rest[n:]
		}
		got := scrubAll(t, s, &splitReader{parts: append(parts, rest)})
		whole, _, changed := s.scrub(nil, body, true, make([]int, len(s.pairs)))
		if !changed {
			whole = body
		}
		if got != string(whole) {
			t.Fatalf("read in %q: %q; read whole: %q", parts, got, whole)
		}
		for _, v := range []string{"sk-VALUE-1", "tok-22"} {
			if strings.Contains(got, v) {
				t.Fatalf("%q left in %q", v, got)
			}
		}
	})
}

// BenchmarkScrubBody measures the body scrubber's throughput (bytes/s) on text without a
// value, as most answers are, and with a value every 4 KiB.
func BenchmarkScrubBody(b *testing.B) {
	text := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789-_:{}\",\n"
	for i := range text {
		text[i] = alphabet[rng.IntN(len(alphabet))]
	}
	withValues := bytes.Clone(text)
	for i := 0; i+64 < len(withValues); i += 4 << 10 {
		copy(withValues[i:], "sk-ant-api03-0123456789abcdef0123456789")
	}
	s := testScrubber(b, "sk-ant-api03-0123456789abcdef0123456789", "hiloop-secret-aaaaaaaaaaaaaaaaaaaaaaaa",
		"ghp_0123456789abcdefABCDEF0123456789abcd", "hiloop-secret-bbbbbbbbbbbbbbbbbbbbbbbb")
	for _, bc := range []struct {
		name string
		body []byte
	}{{"clean", text}, {"values", withValues}} {
		b.Run(bc.name, func(b *testing.B) {
			buf := make([]byte, 128<<10)
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				body := newScrubBody(io.NopCloser(&tlsReads{b: bc.body}), s, &http.Response{})
				if _, err := io.CopyBuffer(io.Discard, onlyReader{body}, buf); err != nil {
					b.Fatal(err)
				}
				body.Close()
			}
		})
	}
}

// tlsReads answers reads of at most 16 KiB, a TLS record's worth, as a host's body does.
type tlsReads struct{ b []byte }

func (r *tlsReads) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 16<<10)], r.b)
	r.b = r.b[n:]
	return n, nil
}

// onlyReader hides a WriterTo, so a copy reads as httputil's ReverseProxy does.
type onlyReader struct{ io.Reader }

// A host that hands the request's values back, in every place an answer has, is scrubbed
// before the client reads it: 1xx header fields, header fields, body, trailers. The body's
// length changes with the placeholders', so its Content-Length goes.
func TestTerminateScrubsAnswers(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprint("h2=", h2), func(t *testing.T) {
			w := newSecretWorld(t, nil)
			w.answerWith(func(rw http.ResponseWriter, r *http.Request) {
				key, auth := r.Header.Get("X-Api-Key"), r.Header.Get("Authorization")
				rw.Header().Set("Link", "</style.css?k="+key+">; rel=preload")
				rw.WriteHeader(http.StatusEarlyHints)
				body := "key=" + key + "\nauth=" + auth + "\n"
				rw.Header().Set("X-Echo-Key", key)
				rw.Header().Set("X-Echo-Auth", auth)
				rw.Header().Set("Content-Length", fmt.Sprint(len(body)))
				rw.Header().Set("Trailer", "X-Echo-Trailer")
				io.WriteString(rw, body)
				rw.Header().Set("X-Echo-Trailer", auth)
			})
			c := w.client(t, false, h2)
			var early []string
			req := newRequest(t, "GET", "https://bound.example.test/v1/answer", "", "X-Api-Key", phKey, "Authorization", "Bearer "+phToken)
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
					early = append(early, fmt.Sprint(code, " ", h.Get("Link")))
					return nil
				},
			}))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("status %d, %v: %s", resp.StatusCode, err, body)
			}
			wantBody(t, string(body), "key="+phKey+"\n", "auth=Bearer "+phToken+"\n")
			for name, want := range map[string]string{"X-Echo-Key": phKey, "X-Echo-Auth": "Bearer " + phToken} {
				if got := resp.Header.Get(name); got != want {
					t.Errorf("%s: %q, want %q", name, got, want)
				}
			}
			if got := resp.Trailer.Get("X-Echo-Trailer"); got != "Bearer "+phToken {
				t.Errorf("trailer %q", got)
			}
			if len(early) != 1 || early[0] != "103 </style.css?k="+phKey+">; rel=preload" {
				t.Errorf("1xx answers %q", early)
			}
			if resp.ContentLength != -1 || resp.Header.Get("Content-Length") != "" {
				t.Errorf("length %d, Content-Length %q", resp.ContentLength, resp.Header.Get("Content-Length"))
			}
			all := fmt.Sprint(resp.Header, resp.Trailer, early, string(body))
			if strings.Contains(all, "real-") {
				t.Fatalf("a value reached the client: %s", all)
			}
			closeIdle(c)
			rec := w.record("the connection", byHost(KindTLS, "bound.example.test"))
			if rec.Secret != "api-key,token" || rec.Scrubbed != "api-key,token" || rec.Err != "" {
				t.Fatalf("record %+v", rec)
			}
		})
	}
}

// A host asked for gzip or identity and no range; a gzip body is handed on decompressed and
// scrubbed, whether the host was asked for gzip or not. Every value bound to the host is
// scrubbed, also one the request did not carry (the token, bound under /v1/ only), which the
// host may have kept from an earlier one.
func TestTerminateScrubsGzip(t *testing.T) {
	w := newSecretWorld(t, nil)
	type asked struct{ encoding, rng string }
	got := make(chan asked, 1)
	w.answerWith(func(rw http.ResponseWriter, r *http.Request) {
		got <- asked{r.Header.Get("Accept-Encoding"), r.Header.Get("Range") + r.Header.Get("If-Range")}
		rw.Header().Set("Content-Encoding", "gzip")
		rw.Header().Set("Etag", `"v1"`)
		zw := gzip.NewWriter(rw)
		io.WriteString(zw, "key="+r.Header.Get("X-Api-Key")+"\nkept="+*w.token.Load()+"\n")
		zw.Close()
	})
	for _, tc := range []struct{ accept, asked string }{
		{"br, gzip", "gzip"},
		{"br", "identity"},
		{"", "identity"},
	} {
		c := w.client(t, false, true)
		c.Transport.(*http.Transport).DisableCompression = true // the client sees what the gateway sends
		req := newRequest(t, "GET", "https://bound.example.test/answer", "", "X-Api-Key", phKey, "Range", "bytes=0-3", "If-Range", `"v1"`)
		if tc.accept != "" {
			req.Header.Set("Accept-Encoding", tc.accept)
		}
		r := w.do(t, c, req)
		if a := <-got; a.encoding != tc.asked || a.rng != "" {
			t.Fatalf("client accepting %q: the host was asked for %q, range %q", tc.accept, a.encoding, a.rng)
		}
		if r.status != 200 || r.body != "key="+phKey+"\nkept="+phToken+"\n" {
			t.Fatalf("client accepting %q: status %d, body %q", tc.accept, r.status, r.body)
		}
	}
	c := w.client(t, false, false)
	c.Transport.(*http.Transport).DisableCompression = true
	resp, err := c.Do(newRequest(t, "GET", "https://bound.example.test/answer", "", "X-Api-Key", phKey, "Accept-Encoding", "gzip"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	<-got
	if resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Etag") != `W/"v1"` {
		t.Fatalf("header %v", resp.Header)
	}
	closeIdle(c)
	if rec := w.record("the connection", byHost(KindTLS, "bound.example.test")); rec.Secret != "api-key" || rec.Scrubbed != "api-key,token" {
		t.Fatalf("record %+v", rec)
	}
}

// An answer the gateway cannot scrub is refused, and the refusal audited.
func TestTerminateRefusesUnscrubbable(t *testing.T) {
	w := newSecretWorld(t, nil)
	w.answerWith(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Encoding", "br")
		io.WriteString(rw, "key="+r.Header.Get("X-Api-Key")) // not brotli: it is never read
	})
	c := w.client(t, false, true)
	r := w.do(t, c, newRequest(t, "GET", "https://bound.example.test/answer", "", "X-Api-Key", phKey))
	if r.status != http.StatusBadGateway || strings.Contains(r.body, "real-") {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	wantBody(t, r.body, `refused the answer: the gateway cannot scrub secrets from a body in Content-Encoding "br"`)
	closeIdle(c)
	rec := w.record("the connection", byHost(KindTLS, "bound.example.test"))
	if !strings.Contains(rec.Err, `Content-Encoding "br"`) || rec.Secret != "api-key" {
		t.Fatalf("record %+v", rec)
	}
}

// A streamed answer flows as it comes: a chunk with a value reaches the client scrubbed before
// the host sends the next, and of a chunk that ends in what may be the start of a value, all
// but that start does.
func TestTerminateScrubStreams(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprint("h2=", h2), func(t *testing.T) {
			w := newSecretWorld(t, nil)
			second, third := make(chan struct{}), make(chan struct{})
			w.answerWith(func(rw http.ResponseWriter, r *http.Request) {
				key := r.Header.Get("X-Api-Key")
				rw.Header().Set("Content-Type", "text/event-stream")
				flush := http.NewResponseController(rw).Flush
				io.WriteString(rw, "data: "+key+"\n\n")
				flush()
				for _, step := range []struct {
					wait <-chan struct{}
					send string
				}{{second, "data: " + key[:5]}, {third, key[5:] + "\n\n"}} {
					select {
					case <-step.wait:
					case <-r.Context().Done():
						return
					}
					io.WriteString(rw, step.send)
					flush()
				}
			})
			resp, err := w.client(t, false, h2).Do(newRequest(t, "GET", "https://bound.example.test/answer", "", "X-Api-Key", phKey))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			// A gateway that waited for more than it needs would hang here until the test's
			// deadline: the host sends nothing more until the client has read this.
			if line, err := br.ReadString('\n'); err != nil || line != "data: "+phKey+"\n" {
				t.Fatalf("first event %q, %v", line, err)
			}
			if line, err := br.ReadString('\n'); err != nil || line != "\n" {
				t.Fatalf("first event's end %q, %v", line, err)
			}
			close(second)
			start := make([]byte, len("data: "))
			if _, err := io.ReadFull(br, start); err != nil || string(start) != "data: " {
				t.Fatalf("second event's start %q, %v", start, err)
			}
			close(third)
			rest, err := io.ReadAll(br)
			if err != nil || string(rest) != phKey+"\n\n" {
				t.Fatalf("rest %q, %v", rest, err)
			}
		})
	}
}

// The value put in and the value scrubbed out are the same read of the secret: one rotated
// between the two would otherwise pass through the scrub.
func TestTerminateScrubsTheValueInjected(t *testing.T) {
	var reads atomic.Int32
	w := newSecretWorld(t, nil)
	w.bindings[0].Value = func() []byte { return fmt.Appendf(nil, "rotating-%d", reads.Add(1)) }
	r := w.do(t, w.client(t, false, true), newRequest(t, "GET", "https://bound.example.test/", "", "X-Api-Key", phKey))
	wantBody(t, w.lastGot(), "X-Api-Key: rotating-")
	if strings.Contains(r.body, "rotating-") {
		t.Fatalf("a value reached the client: %s", r.body)
	}
}

// An error the gateway answers with may quote what the host sent: it is scrubbed too.
func TestTerminateFailedScrubsTheError(t *testing.T) {
	p := &Proxy{}
	term := &terminated{p: p}
	s := testScrubber(t, "sk-VALUE-1", "PH-ONE")
	req := httptest.NewRequest("GET", "https://a.test/", nil)
	req = req.WithContext(withScrubber(req.Context(), s))
	rec := httptest.NewRecorder()
	term.failed(rec, req, errors.New(`malformed HTTP status code "sk-VALUE-1"`))
	if rec.Code != http.StatusBadGateway || strings.Contains(rec.Body.String(), "sk-VALUE") || !strings.Contains(rec.Body.String(), `"PH-ONE"`) ||
		strings.Contains(term.err, "sk-VALUE") {
		t.Fatalf("%d %q, audited %q", rec.Code, rec.Body, term.err)
	}
}

// A client that goes away in the middle of an answer leaves the record saying what was
// injected and scrubbed before.
func TestTerminateAuditsAnAnswerBrokenOff(t *testing.T) {
	w := newSecretWorld(t, nil)
	w.answerWith(func(rw http.ResponseWriter, r *http.Request) {
		io.WriteString(rw, "key="+r.Header.Get("X-Api-Key")+"\n")
		for range 1024 { // far more than the sockets between hold
			if _, err := rw.Write(zeros[:64<<10]); err != nil {
				return
			}
		}
	})
	c := w.client(t, false, false)
	resp, err := c.Do(newRequest(t, "GET", "https://bound.example.test/answer", "", "X-Api-Key", phKey))
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	resp.Body.Close() // an HTTP/1.1 body closed unread closes its connection
	if err != nil || line != "key="+phKey+"\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	rec := w.record("the connection", byHost(KindTLS, "bound.example.test"))
	if rec.Secret != "api-key" || rec.Scrubbed != "api-key" || rec.Err != "the response broke off" {
		t.Fatalf("record %+v", rec)
	}
}
