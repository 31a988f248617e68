package fakeprovider

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// sseEvent is one dispatched server-sent event.
type sseEvent struct {
	name string // "message" when the stream names none, as the spec says
	data string
}

// readSSE parses a text/event-stream body as the WHATWG HTML spec's event-stream
// interpretation does (the reader every SDK implements): lines end in LF, CR or CRLF, a line
// starting with ":" is a comment, "field: value" loses one leading space, data lines join with
// LF, a blank line dispatches the event (none when data is empty), the default name is
// "message". It fails the test on an unterminated last event.
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	sc.Split(sseLines)
	var out []sseEvent
	var name string
	var data []string
	pending := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if len(data) > 0 {
				if name == "" {
					name = "message"
				}
				out = append(out, sseEvent{name: name, data: strings.Join(data, "\n")})
			}
			name, data, pending = "", nil, false
			continue
		}
		pending = true
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			data = append(data, value)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the event stream: %v", err)
	}
	if pending {
		t.Fatalf("the event stream ends inside an event (no blank line after it)")
	}
	return out
}

// sseLines splits on LF, CR or CRLF.
func sseLines(data []byte, atEOF bool) (int, []byte, error) {
	for i, b := range data {
		switch b {
		case '\n':
			return i + 1, data[:i], nil
		case '\r':
			if i+1 < len(data) {
				if data[i+1] == '\n' {
					return i + 2, data[:i], nil
				}
				return i + 1, data[:i], nil
			}
			if atEOF {
				return i + 1, data[:i], nil
			}
			return 0, nil, nil // a CR at the end of the buffer may start a CRLF
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// decode unmarshals an event's data into v, failing the test when it is not that JSON.
func decode(t *testing.T, data string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(data), v); err != nil {
		t.Fatalf("event data %s: %v", data, err)
	}
}

// decodeStrict unmarshals body into v and fails the test on a field v does not declare, so
// that the fake's shapes follow the typed mirrors of the official ones below.
func decodeStrict(t *testing.T, body []byte, v any) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
}

// newTestServer serves a fake with cfg on a loopback httptest server.
func newTestServer(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	s := New(cfg)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return s, hs.URL
}

// post sends body (JSON, or a string as it is) to url with the given headers and returns the
// response, its body read in full.
func post(t *testing.T, url string, headers map[string]string, body any) (*http.Response, []byte) {
	t.Helper()
	b, ok := body.(string)
	if !ok {
		j, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		b = string(j)
	}
	h := map[string]string{"Content-Type": "application/json"}
	for k, v := range headers {
		h[k] = v
	}
	return do(t, http.MethodPost, url, h, strings.NewReader(b))
}

// get fetches url with the given headers.
func get(t *testing.T, url string, headers map[string]string) (*http.Response, []byte) {
	t.Helper()
	return do(t, http.MethodGet, url, headers, nil)
}

// do sends a request and returns the response, its body read in full.
func do(t *testing.T, method, url string, headers map[string]string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, out
}

func TestReadSSE(t *testing.T) {
	// The reader itself must follow the spec, or the tests built on it prove nothing.
	in := ": comment\r\nevent: a\r\ndata: one\r\ndata:two\r\n\r\ndata: three\n\nevent: empty\n\nid: 1\rdata: four\r\r"
	got := readSSE(t, strings.NewReader(in))
	want := []sseEvent{{"a", "one\ntwo"}, {"message", "three"}, {"message", "four"}}
	if len(got) != len(want) {
		t.Fatalf("events = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %q, want %q", i, got[i], want[i])
		}
	}
}
