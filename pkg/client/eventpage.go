package client

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
)

// A long session is read in pages of 10,000 events, and encoding/json (its scanner, run twice,
// and its reflection) was most of the time a chat took to open one. The daemon serves every event
// in the one shape it stored it in, so that shape is read directly here, checked as strictly;
// anything else (another daemon's spacing, a key order this code does not expect, JSON that is
// not) takes encoding/json's path, with the same result.

// decodeEventPage decodes the body of GET /v1/sessions/{id}/events.
func decodeEventPage(b []byte) ([]api.SessionEvent, error) {
	if evs, ok := readStoredEvents(b); ok {
		return evs, nil
	}
	var l api.SessionEventList
	err := json.Unmarshal(b, &l)
	return l.Events, err
}

// readStoredEvents reads b when it is exactly {"events":[E,...]} with each E as json.Marshal
// writes an api.SessionEvent: {"seq":N,"type":"T","time":"RFC 3339","data":V} ("data" left
// out when empty); ok is false for anything else. The events' Data share b.
func readStoredEvents(b []byte) (evs []api.SessionEvent, ok bool) {
	r := storedReader{b: bytes.TrimRight(b, " \t\r\n")}
	if !r.lit(`{"events":[`) {
		return nil, false
	}
	evs = make([]api.SessionEvent, 0, bytes.Count(b, []byte(`{"seq":`)))
	if r.lit(`]}`) {
		return evs, r.i == len(r.b)
	}
	for {
		ev, ok := r.event()
		if !ok {
			return nil, false
		}
		evs = append(evs, ev)
		if r.lit(`,`) {
			continue
		}
		return evs, r.lit(`]}`) && r.i == len(r.b)
	}
}

// decodeStreamEvent decodes one event of the stream (a line of a message), as json.Unmarshal
// into an api.SessionEvent would, reading the stored shape directly: a chatty turn streams
// thousands. Data is a copy: the message's buffer is reused.
func decodeStreamEvent(b []byte) (api.SessionEvent, error) {
	r := storedReader{b: b}
	if ev, ok := r.event(); ok && r.i == len(b) {
		ev.Data = bytes.Clone(ev.Data)
		return ev, nil
	}
	var ev api.SessionEvent
	err := json.Unmarshal(b, &ev)
	return ev, err
}

// event reads one event as json.Marshal writes an api.SessionEvent: {"seq":N,"type":"T",
// "time":"RFC 3339","data":V} ("data" left out when empty). Its Data shares r.b.
func (r *storedReader) event() (ev api.SessionEvent, ok bool) {
	if !r.lit(`{"seq":`) {
		return ev, false
	}
	seq, ok := r.uint()
	if !ok || !r.lit(`,"type":`) {
		return ev, false
	}
	typ, ok := r.plainString()
	if !ok || !r.lit(`,"time":`) {
		return ev, false
	}
	ts, ok := r.plainString()
	if !ok {
		return ev, false
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil || !bytes.Equal(t.AppendFormat(nil, time.RFC3339Nano), []byte(ts)) {
		return ev, false // a time Time.MarshalJSON would not write; let encoding/json judge it
	}
	ev.Seq, ev.Type, ev.Time = seq, api.EventType(typ), t
	if r.lit(`,"data":`) {
		start := r.i
		if !r.skipValue() {
			return ev, false
		}
		if bytes.Equal(r.b[start:r.i], []byte("null")) {
			return ev, false // json.Marshal leaves empty Data out
		}
		ev.Data = r.b[start:r.i:r.i]
	}
	return ev, r.lit(`}`)
}

// storedReader reads the daemon's compact JSON; every method reports false where b is not in
// the expected shape.
type storedReader struct {
	b []byte
	i int
}

func (r *storedReader) lit(s string) bool {
	if len(r.b)-r.i < len(s) || string(r.b[r.i:r.i+len(s)]) != s {
		return false
	}
	r.i += len(s)
	return true
}

// uint reads a JSON number that is a uint64 without sign, fraction or exponent.
func (r *storedReader) uint() (uint64, bool) {
	j := r.i
	for j < len(r.b) && r.b[j] >= '0' && r.b[j] <= '9' {
		j++
	}
	if j == r.i || (r.b[r.i] == '0' && j > r.i+1) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(r.b[r.i:j]), 10, 64)
	if err != nil || (j < len(r.b) && (r.b[j] == '.' || r.b[j] == 'e' || r.b[j] == 'E')) {
		return 0, false
	}
	r.i = j
	return n, true
}

// plainString reads a string of printable ASCII without escapes (event types and times).
func (r *storedReader) plainString() (string, bool) {
	if r.i >= len(r.b) || r.b[r.i] != '"' {
		return "", false
	}
	for j := r.i + 1; j < len(r.b); j++ {
		switch c := r.b[j]; {
		case c == '"':
			s := string(r.b[r.i+1 : j])
			r.i = j + 1
			return s, true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return "", false
		}
	}
	return "", false
}

// skipValue moves past one JSON value, which it checks as strictly as json.Valid: Data is
// handed on as JSON, so none that is not can come out of here.
func (r *storedReader) skipValue() bool {
	if r.i >= len(r.b) {
		return false
	}
	switch c := r.b[r.i]; {
	case c == '"':
		return r.skipString()
	case c == '{':
		r.i++
		if r.lit("}") {
			return true
		}
		for {
			if !r.skipString() || !r.lit(":") || !r.skipValue() {
				return false
			}
			if r.lit("}") {
				return true
			}
			if !r.lit(",") {
				return false
			}
		}
	case c == '[':
		r.i++
		if r.lit("]") {
			return true
		}
		for {
			if !r.skipValue() {
				return false
			}
			if r.lit("]") {
				return true
			}
			if !r.lit(",") {
				return false
			}
		}
	case c == 't':
		return r.lit("true")
	case c == 'f':
		return r.lit("false")
	case c == 'n':
		return r.lit("null")
	default:
		return r.skipNumber()
	}
}

// skipString moves past a JSON string: no control characters, only JSON's escapes. Bytes that
// are not UTF-8 pass, as they pass encoding/json into a RawMessage.
func (r *storedReader) skipString() bool {
	if r.i >= len(r.b) || r.b[r.i] != '"' {
		return false
	}
	for j := r.i + 1; j < len(r.b); j++ {
		switch c := r.b[j]; {
		case c == '"':
			r.i = j + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			j++
			if j >= len(r.b) {
				return false
			}
			switch r.b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(r.b) {
					return false
				}
				for _, h := range r.b[j+1 : j+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false
					}
				}
				j += 4
			default:
				return false
			}
		}
	}
	return false
}

// skipNumber moves past a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (r *storedReader) skipNumber() bool {
	b, j := r.b, r.i
	digits := func() bool {
		k := j
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
		return j > k
	}
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case !digits():
		return false
	}
	if j < len(b) && b[j] == '.' {
		j++
		if !digits() {
			return false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if !digits() {
			return false
		}
	}
	r.i = j
	return true
}
