package client

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
)

// storedPage is a page as the daemon serves it: each event as json.Marshal wrote it.
func storedPage(t testing.TB, evs ...api.SessionEvent) []byte {
	b := []byte(`{"events":[`)
	for i, ev := range evs {
		if i > 0 {
			b = append(b, ',')
		}
		e, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, e...)
	}
	return append(b, "]}\n"...)
}

func TestEventPageReadsTheStoredShape(t *testing.T) {
	at := time.Date(2026, 11, 30, 17, 8, 38, 438297, time.UTC)
	evs := []api.SessionEvent{
		{Seq: 1, Type: api.EventPrompt, Time: at, Data: json.RawMessage(`{"text":"a \"quoted\" \\ prompt"}`)},
		{Seq: 2, Type: api.EventUpdate, Time: at.Add(time.Second), Data: json.RawMessage(`{"content":{"text":"}]{[,","type":"text"},"n":[1,2.5e3,true,null,{}]}`)},
		{Seq: 3, Type: api.EventTurnEnd, Time: at.Truncate(time.Second)},
		{Seq: 18446744073709551615, Type: api.EventNotice, Time: at, Data: json.RawMessage(`"x"`)},
	}
	page := storedPage(t, evs...)
	got, ok := readStoredEvents(page)
	if !ok {
		t.Fatalf("the stored shape was not read directly: %s", page)
	}
	checkSameEvents(t, got, page)
	if got, ok := readStoredEvents(storedPage(t)); !ok || len(got) != 0 {
		t.Errorf("empty page = %v, %v", got, ok)
	}
	// Other shapes go to encoding/json, which reads them alike.
	for _, other := range []string{
		`{ "events": [] }`,
		`{"events":[{"type":"update","seq":1,"time":"2026-11-30T17:08:38Z"}]}`,
		`{"events":[{"seq":1,"type":"update","time":"2026-11-30T17:08:38.000Z","data":{}}]}`,
		`{"events":[{"seq":1,"type":"update","time":"2026-11-30T17:08:38+02:00","data":null}]}`,
		`{"events":[{"seq":01,"type":"update","time":"2026-11-30T17:08:38Z"}]}`,
	} {
		got, err := decodeEventPage([]byte(other))
		var want api.SessionEventList
		wantErr := json.Unmarshal([]byte(other), &want)
		if (err == nil) != (wantErr == nil) {
			t.Errorf("%s: error %v, encoding/json's %v", other, err, wantErr)
			continue
		}
		if err == nil {
			checkSameEvents(t, got, []byte(other))
		}
	}
}

// checkSameEvents fails unless got is what encoding/json decodes from body.
func checkSameEvents(t testing.TB, got []api.SessionEvent, body []byte) {
	t.Helper()
	var want api.SessionEventList
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatalf("encoding/json: %v", err)
	}
	if len(got) != len(want.Events) {
		t.Fatalf("%d events; encoding/json reads %d from %s", len(got), len(want.Events), body)
	}
	for i, w := range want.Events {
		g := got[i]
		if g.Seq != w.Seq || g.Type != w.Type || !g.Time.Equal(w.Time) || g.Time.Location().String() != w.Time.Location().String() ||
			!bytes.Equal(g.Data, w.Data) || (g.Data == nil) != (w.Data == nil) {
			t.Fatalf("event %d = %+v; encoding/json reads %+v from %s", i, g, w, body)
		}
	}
}

// FuzzEventPage: whatever the daemon sends, the direct reading and encoding/json agree.
func FuzzEventPage(f *testing.F) {
	at := time.Date(2026, 11, 30, 17, 8, 38, 438297, time.UTC)
	f.Add(storedPage(f, api.SessionEvent{Seq: 1, Type: api.EventUpdate, Time: at, Data: json.RawMessage(`{"a":["}",{"b":"\\\""}]}`)}))
	f.Add(storedPage(f, api.SessionEvent{Seq: 2, Type: api.EventTurnEnd, Time: at}, api.SessionEvent{Seq: 3, Type: "x", Time: at, Data: json.RawMessage(`12`)}))
	f.Add([]byte(`{"events":[{"seq":1,"type":"update","time":"2026-11-30T17:08:38+01:00","data":true}]}`))
	f.Add([]byte(`{"events":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var want api.SessionEventList
		wantErr := json.Unmarshal(b, &want)
		got, ok := readStoredEvents(b)
		if !ok {
			return
		}
		if wantErr != nil {
			t.Fatalf("read directly what encoding/json rejects (%v): %s", wantErr, b)
		}
		checkSameEvents(t, got, b)
	})
}

func BenchmarkEventPage(b *testing.B) {
	body, err := os.ReadFile("/tmp/hlprof/page.json")
	if err != nil {
		b.Skip(err)
	}
	for b.Loop() {
		if _, err := decodeEventPage(body); err != nil {
			b.Fatal(err)
		}
	}
}

// checkStreamEvent fails unless decodeStreamEvent reads b as encoding/json does, error or event.
func checkStreamEvent(t *testing.T, b []byte) {
	t.Helper()
	var want api.SessionEvent
	wantErr := json.Unmarshal(b, &want)
	got, err := decodeStreamEvent(b)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%q: error %v, encoding/json's %v", b, err, wantErr)
	}
	if err == nil && (got.Seq != want.Seq || got.Type != want.Type || !got.Time.Equal(want.Time) ||
		got.Time.Location().String() != want.Time.Location().String() || !bytes.Equal(got.Data, want.Data) || (got.Data == nil) != (want.Data == nil)) {
		t.Fatalf("%q = %+v; encoding/json reads %+v", b, got, want)
	}
}

func TestStreamEventReadsTheStoredShape(t *testing.T) {
	at := time.Date(2026, 11, 30, 17, 8, 38, 438297, time.UTC)
	var stored []byte
	for _, ev := range []api.SessionEvent{
		{Seq: 1, Type: api.EventUpdate, Time: at, Data: json.RawMessage(`{"content":{"text":"chunk 1","type":"text"},"sessionUpdate":"agent_message_chunk"}`)},
		{Seq: 3, Type: api.EventTurnEnd, Time: at.Truncate(time.Second)},
	} {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		r := storedReader{b: b}
		if _, ok := r.event(); !ok || r.i != len(b) {
			t.Errorf("the stored shape was not read directly: %s", b)
		}
		checkStreamEvent(t, b)
		stored = b
	}
	// The event's Data is its own: the stream reuses the message's buffer.
	stored = []byte(`{"seq":1,"type":"update","time":"2026-11-30T17:08:38Z","data":{"a":1}}`)
	ev, err := decodeStreamEvent(stored)
	if err != nil {
		t.Fatal(err)
	}
	clear(stored)
	if string(ev.Data) != `{"a":1}` {
		t.Errorf("the event's data changed with the message's buffer: %q", ev.Data)
	}
	for _, other := range []string{
		`{"seq":1,"type":"update","time":"2026-11-30T17:08:38Z","data":{"a":1}} `,
		`{"seq":1,"type":"update","time":"2026-11-30T17:08:38Z","data":{"a":1}`,
		`{"seq":1,"type":"update","time":"2026-11-30T17:08:38Z","data":{"a":1}}}`,
		`{"type":"update","seq":1,"time":"2026-11-30T17:08:38Z"}`,
		`{"seq":1,"type":"update","time":"2026-11-30T17:08:38+02:00","data":null}`,
		`{"seq":01,"type":"update","time":"2026-11-30T17:08:38Z"}`,
		`{"seq":1,"type":"update","time":"2026-11-30T17:08:38Z","data":{"a":"b`,
	} {
		checkStreamEvent(t, []byte(other))
	}
}

// FuzzStreamEvent: whatever line the daemon streams, the direct reading and encoding/json agree.
func FuzzStreamEvent(f *testing.F) {
	f.Add([]byte(`{"seq":1,"type":"update","time":"2026-11-30T17:08:38.438297Z","data":{"a":["}",{"b":"\\\""}]}}`))
	f.Add([]byte(`{"seq":2,"type":"turn_end","time":"2026-11-30T17:08:38Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkStreamEvent(t, b)
	})
}

// BenchmarkStreamEvent decodes a chatty turn's update as the stream delivers it, directly and
// with encoding/json.
func BenchmarkStreamEvent(b *testing.B) {
	line := []byte(`{"seq":1234,"type":"update","time":"2026-11-30T17:08:38.438297Z","data":{"content":{"text":"chunk 1234","type":"text"},"sessionUpdate":"agent_message_chunk"}}`)
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeStreamEvent(line); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var ev api.SessionEvent
			if err := json.Unmarshal(line, &ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
