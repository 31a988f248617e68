package gateway

// Scrubbing: a host a secret is bound to may hand the value back to the sandbox: an echo
// endpoint, a debug page, an error quoting the request's headers. So on a terminated
// connection every answer is scrubbed before the sandbox reads it: each value of a secret
// bound to the host, wherever it appears in the answer's header fields (1xx, final and
// trailers; names and values) or body, becomes that secret's placeholder, which is what the
// sandbox sent. The body is scrubbed as it streams: only the bytes at the end of a read that
// could be the start of a value (at most its length less one) wait for the next read, so an
// event stream flows event by event.
//
// The gateway asks the host for answers it can scrub: Accept-Encoding gzip (if the client
// accepts it) or identity, and no Range (a value cut in two by a range would pass in halves).
// A gzip body is decompressed and handed on as identity. An answer in any other coding, or a
// switch of protocols (a WebSocket, whose frames would break if the gateway changed their
// lengths), is refused with 502 and audited: its bytes cannot be scrubbed.

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
)

// scrubber replaces, for one request, the values of the secrets bound to its host by their
// placeholders in what the host answers, and notes which secrets it found.
type scrubber struct {
	pairs   []scrubPair
	longest int // the longest value's length
}

type scrubPair struct {
	value       []byte
	text        string // value, to look for in header fields without a copy
	placeholder []byte
	label       string
	hit         atomic.Bool // the value was found and replaced
}

// newScrubber is the scrubber of the values (from secretValues) of bindings; nil when there
// is no value to scrub.
func newScrubber(bindings []Binding, values [][]byte) *scrubber {
	s := &scrubber{}
	for i, v := range values {
		if len(v) == 0 || bindings[i].Placeholder == "" {
			continue
		}
		s.longest = max(s.longest, len(v))
		s.pairs = append(s.pairs, scrubPair{value: v, text: string(v), placeholder: []byte(bindings[i].Placeholder), label: bindings[i].label()})
	}
	if len(s.pairs) == 0 {
		return nil
	}
	return s
}

// scrubbed lists the labels of the secrets whose values were replaced.
func (s *scrubber) scrubbed() []string {
	var out []string
	for i := range s.pairs {
		if s.pairs[i].hit.Load() {
			out = append(out, s.pairs[i].label)
		}
	}
	return out
}

// scrub appends to dst the bytes of d with every value replaced by its placeholder, leftmost
// first and the longest of those starting at one place, up to held: where the tail of d
// begins that could be the start of a value the next bytes complete (len(d) when final, at
// the end of the stream). The bytes from held on are to be scrubbed again with what follows.
// changed reports a replacement; without one dst is returned as it came, and the scrubbed
// bytes are d[:held] as they are. next is scratch, one int a pair.
func (s *scrubber) scrub(dst, d []byte, final bool, next []int) (out []byte, held int, changed bool) {
	// next[k]: where pair k's value is next found in d, at or after pos; -1 nowhere; -2 not
	// looked for yet.
	for k := range s.pairs {
		next[k] = -2
	}
	pos := 0
	held = len(d)
	if !final {
		held = s.holdFrom(d, 0)
	}
	for {
		at, best := -1, -1
		for k := range s.pairs {
			v := s.pairs[k].value
			if next[k] == -2 || next[k] >= 0 && next[k] < pos {
				if i := bytes.Index(d[pos:], v); i >= 0 {
					next[k] = pos + i
				} else {
					next[k] = -1
				}
			}
			if i := next[k]; i >= 0 && (at < 0 || i < at || i == at && len(v) > len(s.pairs[best].value)) {
				at, best = i, k
			}
		}
		// A value found from held on might be part of a longer one that the next bytes
		// complete: it waits with the rest of the tail.
		if at < 0 || at >= held {
			break
		}
		p := &s.pairs[best]
		dst = append(dst, d[pos:at]...)
		dst = append(dst, p.placeholder...)
		p.hit.Store(true)
		changed = true
		pos = at + len(p.value)
		if pos > held {
			held = s.holdFrom(d, pos)
		}
	}
	if !changed {
		return dst, held, false
	}
	return append(dst, d[pos:held]...), held, true
}

// holdFrom returns the first place at or after from where the rest of d is a proper prefix of
// a value (len(d) when there is none): from there on, d may be a value cut by the end of a read.
func (s *scrubber) holdFrom(d []byte, from int) int {
	held := len(d)
	start := max(from, len(d)-(s.longest-1))
	for k := range s.pairs {
		v := s.pairs[k].value
		// Only a place within len(v)-1 of the end leaves a proper prefix of v.
		for x := max(start, len(d)-(len(v)-1)); x < held; x++ {
			i := bytes.IndexByte(d[x:held], v[0])
			if i < 0 {
				break
			}
			x += i
			if bytes.HasPrefix(v, d[x:]) {
				held = x
				break
			}
		}
	}
	return held
}

// text returns t scrubbed, and whether anything was replaced; without a value in it, t as it
// is and no allocation.
func (s *scrubber) text(t string) (string, bool) {
	found := false
	for k := range s.pairs {
		if strings.Contains(t, s.pairs[k].text) {
			found = true
			break
		}
	}
	if !found {
		return t, false
	}
	out, _, _ := s.scrub(nil, []byte(t), true, make([]int, len(s.pairs)))
	return string(out), true
}

// header scrubs h in place: each field's values and its name. A name is matched in any case:
// net/http hands it on in canonical case (X-Sk-Abc for x-sk-ABC), changed but not enough.
func (s *scrubber) header(h map[string][]string) {
	for name, vs := range h {
		for i, v := range vs {
			if r, ok := s.text(v); ok {
				vs[i] = r
			}
		}
		if r, ok := s.name(name); ok {
			delete(h, name)
			h[r] = append(h[r], vs...)
		}
	}
}

// name returns the field name n with every value, in any case, replaced by its placeholder,
// and whether anything was.
func (s *scrubber) name(n string) (string, bool) {
	var out []byte
	from := 0 // n[from:i] is not copied to out yet
	for i := 0; i < len(n); {
		k := -1
		for j := range s.pairs {
			v := s.pairs[j].text
			if len(n)-i >= len(v) && strings.EqualFold(n[i:i+len(v)], v) && (k < 0 || len(v) > len(s.pairs[k].text)) {
				k = j
			}
		}
		if k < 0 {
			i++
			continue
		}
		out = append(append(out, n[from:i]...), s.pairs[k].placeholder...)
		s.pairs[k].hit.Store(true)
		i += len(s.pairs[k].text)
		from = i
	}
	if out == nil {
		return n, false
	}
	return string(append(out, n[from:]...)), true
}

// scrubKey is the context key of a request's scrubber.
type scrubKey struct{}

// withScrubber returns ctx carrying s for the request's answer; ctx itself when s is nil.
func withScrubber(ctx context.Context, s *scrubber) context.Context {
	if s == nil {
		return ctx
	}
	return context.WithValue(ctx, scrubKey{}, s)
}

// scrubberOf is the scrubber of the request whose context is ctx; nil when its answer is not
// scrubbed.
func scrubberOf(ctx context.Context) *scrubber {
	s, _ := ctx.Value(scrubKey{}).(*scrubber)
	return s
}

// scrubTransport scrubs the answers to requests that carry a scrubber: 1xx header fields as
// they arrive (httputil's ReverseProxy hands them to the client from its own trace, which runs
// after this one), then the answer's header fields, body and trailers.
type scrubTransport struct{ http.RoundTripper }

func (t scrubTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	s := scrubberOf(req.Context())
	if s == nil {
		return t.RoundTripper.RoundTrip(req)
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
			s.header(h)
			return nil
		},
	}))
	resp, err := t.RoundTripper.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if err := s.response(resp); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// unscrubbable is an answer the gateway refuses because it cannot scrub it.
type unscrubbable struct{ what string }

func (e *unscrubbable) Error() string {
	return "refused the answer: the gateway cannot scrub secrets from " + e.what
}

// response scrubs resp's header fields and sets its body and trailers to be scrubbed as they
// are read. Their lengths change with the placeholders', so Content-Length goes: the server
// sends the body chunked (HTTP/1.1) or to the end of its stream.
func (s *scrubber) response(resp *http.Response) error {
	s.header(resp.Header)
	s.header(resp.Trailer) // the names announced; the values come after the body
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return &unscrubbable{what: fmt.Sprintf("a switch to %q (its bytes are not HTTP messages)", resp.Header.Get("Upgrade"))}
	}
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	coding, err := contentCoding(resp.Header)
	hasBody := resp.Body != nil && resp.Body != http.NoBody && resp.Request.Method != http.MethodHead
	switch {
	case err != nil && hasBody:
		return err
	case err != nil:
		return nil // no body: only its header fields, already scrubbed
	case coding == "gzip":
		// Handed on decompressed: identity, a representation other than the host's, so its
		// validator is weak (as a compressing server's is for its encoding).
		resp.Header.Del("Content-Encoding")
		if etag := resp.Header.Get("Etag"); etag != "" && !strings.HasPrefix(etag, "W/") {
			resp.Header.Set("Etag", "W/"+etag)
		}
		if hasBody {
			resp.Body = &gunzipBody{src: resp.Body}
		}
	}
	if hasBody {
		resp.Body = newScrubBody(resp.Body, s, resp)
	}
	return nil
}

// contentCoding is the answer's Content-Encoding if the gateway can scrub it: "" (identity) or
// "gzip".
func contentCoding(h http.Header) (string, error) {
	var codings []string
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	switch {
	case len(codings) == 0:
		return "", nil
	case len(codings) == 1 && (codings[0] == "gzip" || codings[0] == "x-gzip"):
		return "gzip", nil
	}
	return "", &unscrubbable{what: fmt.Sprintf("a body in Content-Encoding %q (it asks for gzip or identity)", strings.Join(codings, ", "))}
}

// scrubAcceptEncoding is the Accept-Encoding the gateway sends a host whose answers it
// scrubs, from the client's: gzip when the client takes it, else identity.
func scrubAcceptEncoding(client []string) string {
	var gzipOK, gzipRefused, any bool
	for _, v := range client {
		for c := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(c, ";")
			switch strings.ToLower(strings.TrimSpace(coding)) {
			case "gzip", "x-gzip":
				if qZero(params) {
					gzipRefused = true
				} else {
					gzipOK = true
				}
			case "*":
				any = any || !qZero(params)
			}
		}
	}
	if gzipOK || any && !gzipRefused {
		return "gzip"
	}
	return "identity"
}

// qZero reports whether the parameters of an Accept-Encoding member hold q=0.
func qZero(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(p, "=")
		if strings.EqualFold(strings.TrimSpace(k), "q") {
			v = strings.TrimRight(strings.TrimSpace(v), "0")
			return v == "" || v == "." || v == "0."
		}
	}
	return false
}

// gunzipBody decompresses a gzip body, starting at its first read: the gzip header is read
// from the host then, not while the answer's header fields are handed on.
type gunzipBody struct {
	src io.ReadCloser
	zr  *gzip.Reader
}

func (g *gunzipBody) Read(p []byte) (int, error) {
	if g.zr == nil {
		zr, err := gzip.NewReader(g.src)
		if err != nil {
			if err == io.EOF {
				return 0, io.EOF // an empty body, compressed or not, is empty
			}
			return 0, fmt.Errorf("the host's gzip body: %w", err)
		}
		g.zr = zr
	}
	return g.zr.Read(p)
}

func (g *gunzipBody) Close() error { return g.src.Close() }

// scrubBufSize is the body scrubber's buffer: a read of the host's (a TLS record, an HTTP/2
// frame of at most maxH2Frame) after the tail held back from the previous one (less than the
// longest value, at most api.MaxSecretValueBytes).
const scrubBufSize = maxH2Frame + 32<<10

var scrubBuffers = sync.Pool{New: func() any { return new([scrubBufSize]byte) }}

// scrubBody is an answer's body, scrubbed as it is read.
type scrubBody struct {
	src  io.ReadCloser
	s    *scrubber
	resp *http.Response // whose trailers are scrubbed once the body is read

	buf       []byte              // read from src: the held tail, then the last read
	pooled    *[scrubBufSize]byte // buf's array, back to the pool on Close
	tail, end int                 // buf[tail:end] is held back for the next read
	ready     []byte              // scrubbed, not read yet: in buf, or in out
	out       []byte              // where a scrubbed read with replacements is built
	next      []int
	err       error // src's, once it gave one
}

func newScrubBody(src io.ReadCloser, s *scrubber, resp *http.Response) *scrubBody {
	b := &scrubBody{src: src, s: s, resp: resp, next: make([]int, len(s.pairs))}
	if s.longest < scrubBufSize-maxH2Frame {
		b.pooled = scrubBuffers.Get().(*[scrubBufSize]byte)
		b.buf = b.pooled[:]
	} else {
		b.buf = make([]byte, 2*s.longest+maxH2Frame)
	}
	return b
}

func (b *scrubBody) Read(p []byte) (int, error) {
	for len(b.ready) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		if b.buf == nil {
			return 0, errors.New("read of a closed body")
		}
		// The tail held back is read again, ahead of what comes next.
		held := copy(b.buf, b.buf[b.tail:b.end])
		n, err := b.src.Read(b.buf[held:])
		d := b.buf[:held+n]
		switch {
		case err == io.EOF:
			b.err = err
		case err != nil:
			// The held tail may be the start of a value: it is dropped with the broken body.
			b.err = err
			d = d[:0]
		}
		out, k, changed := b.s.scrub(b.out[:0], d, b.err != nil, b.next)
		if changed {
			b.out, b.ready = out, out
		} else {
			b.ready = d[:k]
		}
		b.tail, b.end = k, len(d)
	}
	n := copy(p, b.ready)
	b.ready = b.ready[n:]
	return n, nil
}

// Close closes the host's body, which completes its trailers, and scrubs them: httputil's
// ReverseProxy hands them on after Close.
func (b *scrubBody) Close() error {
	err := b.src.Close()
	b.s.header(b.resp.Trailer)
	if b.pooled != nil {
		scrubBuffers.Put(b.pooled)
		b.pooled = nil
	}
	b.buf, b.ready = nil, nil
	return err
}
