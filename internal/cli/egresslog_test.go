package cli

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
)

func TestWriteEgressRecord(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		rec  api.EgressRecord
		want []string // fields of the table line, split on runs of spaces
	}{
		{api.EgressRecord{Seq: 3, Time: at, Kind: "tls", Host: "api.example.test", Port: 443, Addr: "127.0.0.1:8443", Allowed: true,
			Rule: "route", BytesUp: 517, BytesDown: 4096, DurationMS: 12.4, Secret: true},
			[]string{"3", "tls", "api.example.test:443", "allowed", "517 B", "4 KiB", "12ms", "route (secret injected)"}},
		{api.EgressRecord{Seq: 8, Time: at, Kind: "connect", Host: "api.example.test", Port: 443, Allowed: true,
			Rule: "route", Secret: true, SecretScrubbed: true},
			[]string{"8", "connect", "api.example.test:443", "allowed", "0 B", "0 B", "0s", "route (secret injected) (secret scrubbed from the answer)"}},
		{api.EgressRecord{Seq: 4, Time: at, Kind: "http", Port: 80, Addr: "10.0.0.1:80", Rule: "10.0.0.1 is private"},
			[]string{"4", "http", "10.0.0.1:80", "denied", "0 B", "0 B", "0s", "10.0.0.1 is private"}},
		{api.EgressRecord{Seq: 5, Time: at, Kind: "dns", Host: "nowhere.test", QueryType: "AAAA", Allowed: true, Rule: "nxdomain"},
			[]string{"5", "dns", "nowhere.test AAAA", "allowed", "0 B", "0 B", "0s", "nxdomain"}},
		{api.EgressRecord{Seq: 6, Time: at, Kind: "connect", Host: "down.test", Port: 443, Allowed: true, Error: "connection refused"},
			[]string{"6", "connect", "down.test:443", "allowed", "0 B", "0 B", "0s", "error: connection refused"}},
		{api.EgressRecord{Seq: 7, Time: at, Kind: api.EgressKindDropped, Allowed: true, Dropped: 9, Error: "9 records dropped"},
			[]string{"7", "dropped", "-", "-", "0 B", "0 B", "0s", "error: 9 records dropped"}},
	} {
		var b bytes.Buffer
		b.WriteString(egressLine(tc.rec))
		fields := regexpSpaces.Split(strings.TrimSpace(b.String()), -1)
		// seq, time, then the rest; the time is local, so it is left out.
		got := append([]string{fields[0]}, fields[2:]...)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("table line %q\n got %q\nwant %q", b.String(), got, tc.want)
		}
		b.Reset()
		if err := writeRecord(&b, "json", tc.rec); err != nil {
			t.Fatal(err)
		}
		var back api.EgressRecord
		if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Seq != tc.rec.Seq || strings.Count(b.String(), "\n") != 1 {
			t.Errorf("json line %q: %v", b.String(), err)
		}
	}
}

// regexpSpaces splits a table line into its columns: two or more spaces apart.
var regexpSpaces = regexp.MustCompile(`  +`)
