package eventlog

import (
	"encoding/json"
	"strconv"

	"github.com/hiloop/hiloop/pkg/api"
)

// encodeEvent returns the bytes the log stores for ev, which are json.Marshal(ev)'s, with stamp
// being ev.Time's JSON (the same for a whole batch). ev.Data must be valid JSON, as Enqueue
// makes sure. It writes them itself when json.Marshal would copy the data as it is (the common
// case: no blank outside strings, nothing it escapes for HTML), which saves the reflection and
// the data's second pass through encoding/json's scanner; anything else it leaves to
// json.Marshal.
func encodeEvent(ev *api.SessionEvent, stamp []byte) ([]byte, error) {
	if !plainType(ev.Type) || !plainJSON(ev.Data) {
		return json.Marshal(ev)
	}
	b := make([]byte, 0, len(`{"seq":,"type":"","time":,"data":}`)+20+len(ev.Type)+len(stamp)+len(ev.Data))
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, ev.Seq, 10)
	b = append(b, `,"type":"`...)
	b = append(b, ev.Type...)
	b = append(b, `","time":`...)
	b = append(b, stamp...)
	if len(ev.Data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, ev.Data...)
	}
	return append(b, '}'), nil
}

// plainType reports whether an event type is its own JSON string's contents (lower-case
// letters and underscores, as every api.EventType is).
func plainType(t api.EventType) bool {
	for i := 0; i < len(t); i++ {
		if c := t[i]; (c < 'a' || c > 'z') && c != '_' {
			return false
		}
	}
	return true
}

// plainJSON reports whether json.Marshal leaves the valid JSON data as it is when it encodes it
// as a json.RawMessage: it compacts it (drops blanks outside strings) and escapes <, >, &,
// U+2028 and U+2029 in it, and data has none of those.
func plainJSON(data []byte) bool {
	inString := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			inString = !inString
		case '\\':
			i++ // only in a string: the escaped byte is not its end
		case ' ', '\t', '\n', '\r':
			if !inString {
				return false
			}
		case '<', '>', '&':
			return false
		case 0xE2: // U+2028 and U+2029 are E2 80 A8 and E2 80 A9
			if i+2 < len(data) && data[i+1] == 0x80 && data[i+2]&^1 == 0xA8 {
				return false
			}
		}
	}
	return true
}
