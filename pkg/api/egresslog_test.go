package api

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// The record's field names are a contract with every `-o json` reader: they are added to, never
// renamed, and each is always present (answers and dropped only where they apply).
func TestEgressRecordFields(t *testing.T) {
	b, err := json.Marshal(EgressRecord{Seq: 1, Time: time.Unix(0, 0).UTC(), Kind: "dns"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	want := []string{"addr", "allowed", "bytes_down", "bytes_up", "duration_ms", "error", "host", "kind", "port",
		"query_type", "rule", "secret", "seq", "time"}
	if !slices.Equal(got, want) {
		t.Fatalf("fields %v, want %v", got, want)
	}

	in := `{"records":[{"seq":7,"time":"2026-01-02T03:04:05Z","kind":"dropped","host":"","port":0,"addr":"",
		"allowed":true,"rule":"","error":"3 records dropped","bytes_up":0,"bytes_down":0,"duration_ms":0.25,
		"secret":false,"query_type":"","answers":["192.0.2.1"],"dropped":3}]}`
	var l EgressRecordList
	if err := json.Unmarshal([]byte(in), &l); err != nil {
		t.Fatal(err)
	}
	if r := l.Records[0]; r.Seq != 7 || r.Dropped != 3 || r.DurationMS != 0.25 || r.Answers[0] != "192.0.2.1" || r.Kind != EgressKindDropped {
		t.Fatalf("decoded %+v", r)
	}
}
