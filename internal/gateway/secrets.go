package gateway

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// Binding is one secret attached to a sandbox, as the gateway needs it: the sandbox holds only
// Placeholder; the gateway puts the real value in Header, and only there, of requests to Hosts
// (under PathPrefix) that it re-originates over TLS itself. The secrets store makes Bindings;
// the gateway never keeps a value beyond the request that carries it.
type Binding struct {
	Name        string   // the secret's name, for the audit ("" : the placeholder stands in)
	Header      string   // the one header the value goes in, e.g. "Authorization", "x-api-key"
	Format      string   // the header's value, "{value}" standing for the secret; "": "{value}"
	PathPrefix  string   // only requests whose path starts with it; "": every path
	Hosts       []string // exact host names (lower case, no port, no trailing dot)
	Placeholder string   // what the sandbox sees instead of the value; unique per secret and sandbox

	// Value returns the secret's current value, called for each request so a rotation applies
	// to the next request at once. nil or an empty result: the secret is gone (deleted,
	// detached), and the placeholder is sent as it is.
	Value func() []byte
}

// label is what the audit says about b: never its value.
func (b *Binding) label() string {
	if b.Name != "" {
		return b.Name
	}
	return b.Placeholder
}

// boundTo reports whether b's value may go to host.
func (b *Binding) boundTo(host string) bool {
	return host != "" && slices.ContainsFunc(b.Hosts, func(h string) bool { return normalHost(h) == host })
}

// secretsFor asks the Proxy's Secrets lookup about host.
func (p *Proxy) secretsFor(host string) []Binding {
	if p.Secrets == nil {
		return nil
	}
	return p.Secrets(host)
}

// bound reports whether a connection to host is terminated: some binding puts a secret in
// requests to it. Every other host is tunnelled byte for byte.
func (p *Proxy) bound(host string) bool {
	host = normalHost(host)
	if host == "" || p.CA == nil {
		return false
	}
	for _, b := range p.secretsFor(host) {
		if b.Placeholder != "" && b.boundTo(host) {
			return true
		}
	}
	return false
}

// secretUse is what applying the bindings did to one request.
type secretUse struct {
	injected []string // the labels of the secrets put in
	misuse   bool     // a placeholder was seen where it is not bound (or could not be replaced)
}

// secretValues reads, once for one request to host, the value of each binding bound to host
// (values[i] is bindings[i]'s; nil when not bound there or gone). The value injected and the
// value scrubbed from the answer are then the same, even if the secret is rotated in between;
// the values live as long as the request.
func secretValues(bindings []Binding, host string) [][]byte {
	values := make([][]byte, len(bindings))
	for i := range bindings {
		b := &bindings[i]
		if b.Placeholder != "" && b.Value != nil && b.boundTo(host) {
			values[i] = b.Value()
		}
	}
	return values
}

// applySecrets puts the values of bindings (values, from secretValues) into the request r that
// the gateway re-originates over TLS to host. A header is swapped only when it is exactly what
// the client of a binding sends: the binding's header (the name in any case, as HTTP has it),
// in one field line, whose value is byte for byte the binding's Format with the placeholder for
// {value}; it becomes the Format with the value. The host must be one of the binding's Hosts,
// the request's authority host itself (so a front shared by many hosts cannot route the value
// elsewhere) and the path under its prefix. A placeholder, in any case, anywhere else is left
// as it is and reported as misuse: in another header or the URL, inside a longer value
// ("pre-PLACEHOLDER-post", "Basic PLACEHOLDER" for a Format "Bearer {value}"), in a second
// field line of the header, or in a binding whose value is gone. So is one in the body, which
// is checked as it streams (watchBody). Swapping only the exact value keeps the value out of
// text the host may hand back whole (an error quoting the header it could not parse).
func applySecrets(bindings []Binding, values [][]byte, host string, r *http.Request) secretUse {
	var use secretUse
	authority := requestHost(r.Host)
	var fold []byte // a header value in lower case, to find a placeholder in any case
	for i := range bindings {
		b := &bindings[i]
		if b.Placeholder == "" {
			continue
		}
		ph := appendLower(nil, b.Placeholder)
		here := b.boundTo(host) && authority == host && strings.HasPrefix(r.URL.Path, b.PathPrefix)
		want := b.formatted(b.Placeholder)
		// Field lines of one name are one field, their values joined by commas (RFC 9110 5.3),
		// and hosts differ in which line they read when there are two. The field's value is
		// then no longer exactly the Format, so with two Authorization lines neither is
		// swapped: swapping one would let the other travel with it, and which one the host
		// reads (and may hand back) would be its choice.
		lines := 0
		for name, vs := range r.Header {
			if strings.EqualFold(name, b.Header) {
				lines += len(vs)
			}
		}
		for name, vs := range r.Header {
			for j, v := range vs {
				fold = appendLower(fold[:0], v)
				if !bytes.Contains(fold, ph) {
					continue
				}
				if !here || !strings.EqualFold(name, b.Header) || lines != 1 || v != want {
					use.misuse = true
					continue
				}
				value, ok := formatSecret(b, values[i])
				if !ok {
					use.misuse = true
					continue
				}
				vs[j] = value
				if !slices.Contains(use.injected, b.label()) {
					use.injected = append(use.injected, b.label())
				}
			}
		}
		for _, part := range [...]string{r.URL.RawPath, r.URL.Path, r.URL.RawQuery, r.URL.Fragment} {
			if fold = appendLower(fold[:0], part); bytes.Contains(fold, ph) {
				use.misuse = true
			}
		}
	}
	return use
}

// formatted is b's header value with v for {value}.
func (b *Binding) formatted(v string) string {
	f := b.Format
	if f == "" {
		f = "{value}"
	}
	return strings.ReplaceAll(f, "{value}", v)
}

// formatSecret returns b's header value with v, its value for the request, in it; false when
// the secret is gone or would break the header (a value with a line break could add headers
// of its own).
func formatSecret(b *Binding, v []byte) (string, bool) {
	if len(v) == 0 || !validHeaderValue(v) {
		return "", false
	}
	return b.formatted(string(v)), true
}

// appendLower appends s to dst with ASCII letters in lower case.
func appendLower(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// validHeaderValue reports whether v may be an HTTP field value (RFC 9110 5.5): no control
// bytes other than tab.
func validHeaderValue(v []byte) bool {
	for _, c := range v {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// requestHost is the host of a request's authority (Host header), normalised.
func requestHost(hostport string) string {
	if h, port, err := net.SplitHostPort(hostport); err == nil {
		if _, err := strconv.ParseUint(port, 10, 16); err == nil {
			return normalHost(h)
		}
	}
	return normalHost(hostport)
}

// placeholders lists the placeholders of bindings, to look for in what the gateway carries.
func placeholders(bindings []Binding) [][]byte {
	var out [][]byte
	for _, b := range bindings {
		if b.Placeholder != "" {
			out = append(out, []byte(b.Placeholder))
		}
	}
	return out
}

// containsAny reports whether b holds one of phs.
func containsAny(b []byte, phs [][]byte) bool {
	for _, ph := range phs {
		if bytes.Contains(b, ph) {
			return true
		}
	}
	return false
}

// watchBody wraps a request body so that a placeholder in it, even one split across reads, sets
// seen. The body flows on unchanged and unbuffered.
func watchBody(body io.ReadCloser, phs [][]byte, seen *atomic.Bool) io.ReadCloser {
	longest := 0
	for _, ph := range phs {
		longest = max(longest, len(ph))
	}
	if body == nil || body == http.NoBody || longest == 0 {
		return body
	}
	return &watchedBody{ReadCloser: body, phs: phs, keep: longest - 1, seen: seen}
}

type watchedBody struct {
	io.ReadCloser
	phs  [][]byte
	keep int    // the bytes of the previous reads kept to find a placeholder split across reads
	tail []byte // the last keep bytes read so far, followed by the current read while it is scanned
	seen *atomic.Bool
}

func (w *watchedBody) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	if n == 0 || w.seen.Load() {
		return n, err
	}
	// The seam between the previous reads and this one, then this read itself: no copy of it.
	w.tail = append(w.tail, p[:min(n, w.keep)]...)
	if containsAny(w.tail, w.phs) || containsAny(p[:n], w.phs) {
		w.seen.Store(true)
	}
	if n >= w.keep {
		w.tail = append(w.tail[:0], p[n-w.keep:n]...)
	} else if len(w.tail) > w.keep {
		w.tail = append(w.tail[:0], w.tail[len(w.tail)-w.keep:]...)
	}
	return n, err
}
