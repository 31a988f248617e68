package eventlog

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
)

// checkEncoding fails unless the log stores for ev exactly what json.Marshal makes of it.
func checkEncoding(t *testing.T, ev api.SessionEvent) {
	t.Helper()
	stamp, err := ev.Time.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := encodeEvent(&ev, stamp)
	want, wantErr := json.Marshal(ev)
	if err != nil || wantErr != nil || !bytes.Equal(got, want) {
		t.Fatalf("encodeEvent(%+v) = %s, %v; json.Marshal: %s, %v", ev, got, err, want, wantErr)
	}
}

func TestEncodeEventIsJSONMarshal(t *testing.T) {
	// A harness's update, the bulk of the log, takes the short way.
	if !plainJSON([]byte(`{"content":{"text":"chunk \\ \"1\" é","type":"text"},"sessionUpdate":"agent_message_chunk"}`)) {
		t.Error("an update with no blank outside strings and nothing to escape is not plain")
	}
	times := []time.Time{
		time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 1, 6, 0, 0, 123456789, time.UTC),
		time.Date(2026, 12, 1, 6, 0, 0, 120000000, time.UTC),
	}
	for _, data := range []string{
		``,
		`null`,
		`{}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"chunk 1"}}`,
		`{"a": 1, "b" :[1 ,2]}`,
		"{\n\t\"a\":\r\n1}",
		`{"t":"a <b> & c"}`,
		`{"t":"\u003c"}`,
		"{\"t\":\"\u2028 \u2029 \u2027 \u202a é ’\"}",
		`{"t":"\" \\ \\\" \"  "}`,
		`{"t":"\\"}`,
		`"  "`,
		`[1, "x"]`,
		`12.5e3`,
		`true`,
	} {
		for _, typ := range api.EventTypes() {
			for i, tm := range times {
				checkEncoding(t, api.SessionEvent{Seq: uint64(i) * 1e9, Type: typ, Time: tm, Data: json.RawMessage(data)})
			}
		}
	}
}

// FuzzEncodeEvent holds the log's own encoding of an event to json.Marshal's for any data
// Enqueue accepts.
func FuzzEncodeEvent(f *testing.F) {
	for _, seed := range []string{`{"a":"b c"}`, `{"a" : "<"}`, "[\"\u2028\"]", `"\\\""`} {
		f.Add([]byte(seed), uint64(7))
	}
	tm := time.Date(2026, 12, 1, 6, 0, 0, 5, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte, seq uint64) {
		if len(data) > 0 && !json.Valid(data) {
			return
		}
		checkEncoding(t, api.SessionEvent{Seq: seq, Type: api.EventUpdate, Time: tm, Data: data})
	})
}
