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

// applySecrets puts the values of bindings into the request r that the gateway re-originates
// over TLS to host: a header value holding a binding's placeholder becomes the binding's
// Format with the value, if the header is the binding's, host one of its Hosts, the request's
// authority host itself (so a front shared by many hosts cannot route the value elsewhere) and
// the path under its prefix. A placeholder anywhere else (another header, the URL, a trailer
// announced, a binding whose value is gone) is left as it is and reported as misuse; so is one
// in the body, which is checked as it streams (watchBody).
func applySecrets(bindings []Binding, host string, r *http.Request) secretUse {
	var use secretUse
	authority := requestHost(r.Host)
	for i := range bindings {
		b := &bindings[i]
		ph := b.Placeholder
		if ph == "" {
			continue
		}
		here := b.boundTo(host) && authority == host && strings.HasPrefix(r.URL.Path, b.PathPrefix)
		for name, values := range r.Header {
			for j, v := range values {
				if !strings.Contains(v, ph) {
					continue
				}
				if !here || !strings.EqualFold(name, b.Header) {
					use.misuse = true
					continue
				}
				value, ok := formatSecret(b)
				if !ok {
					use.misuse = true
					continue
				}
				values[j] = value
				if !slices.Contains(use.injected, b.label()) {
					use.injected = append(use.injected, b.label())
				}
			}
		}
		if strings.Contains(r.URL.RawPath, ph) || strings.Contains(r.URL.Path, ph) ||
			strings.Contains(r.URL.RawQuery, ph) || strings.Contains(r.URL.Fragment, ph) {
			use.misuse = true
		}
	}
	return use
}

// formatSecret returns b's header value with its secret in it, or false when the secret is gone
// or would break the header (a value with a line break could add headers of its own).
func formatSecret(b *Binding) (string, bool) {
	if b.Value == nil {
		return "", false
	}
	v := b.Value()
	if len(v) == 0 || !validHeaderValue(v) {
		return "", false
	}
	f := b.Format
	if f == "" {
		f = "{value}"
	}
	return strings.ReplaceAll(f, "{value}", string(v)), true
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
