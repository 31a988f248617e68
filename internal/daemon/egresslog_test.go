package daemon

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/gateway"
	"github.com/hiloop/hiloop/pkg/api"
)

func TestEgressRecordFromGateway(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	for _, tc := range []struct {
		in   gateway.Record
		want api.EgressRecord
	}{
		{gateway.Record{Sandbox: "box", SandboxID: "id1", Time: at, Kind: gateway.KindTLS, Host: "api.example.test", Port: 443,
			Addr: netip.MustParseAddrPort("127.0.0.1:8443"), Allowed: true, Rule: "route api.example.test:443",
			BytesUp: 10, BytesDown: 20, Duration: 1500 * time.Microsecond, Secret: "api-key"},
			api.EgressRecord{Time: at.UTC(), Kind: "tls", Host: "api.example.test", Port: 443, Addr: "127.0.0.1:8443",
				Allowed: true, Rule: "route api.example.test:443", BytesUp: 10, BytesDown: 20, DurationMS: 1.5, Secret: true}},
		{gateway.Record{Time: at, Kind: gateway.KindConnect, Host: "api.example.test", Port: 443, Allowed: true, Terminated: true,
			SecretMisuse: true, Scrubbed: "api-key,token"},
			api.EgressRecord{Time: at.UTC(), Kind: "connect", Host: "api.example.test", Port: 443, Allowed: true, Terminated: true,
				SecretMisuse: true, SecretScrubbed: true}},
		{gateway.Record{Time: at, Kind: gateway.KindHTTP, Port: 80, Addr: netip.MustParseAddrPort("[fd00::1]:80"),
			Rule: "fd00::1 is in fc00::/7 (private)", Err: "", Duration: 3 * time.Millisecond},
			api.EgressRecord{Time: at.UTC(), Kind: "http", Port: 80, Addr: "[fd00::1]:80", Rule: "fd00::1 is in fc00::/7 (private)", DurationMS: 3}},
		{gateway.Record{Time: at, Kind: gateway.KindDNS, Host: "api.example.test", Allowed: true, Rule: "route", QueryType: "A",
			Answers: []netip.Addr{netip.MustParseAddr("198.18.0.1")}, BytesUp: 30, BytesDown: 46},
			api.EgressRecord{Time: at.UTC(), Kind: "dns", Host: "api.example.test", Allowed: true, Rule: "route", QueryType: "A",
				Answers: []string{"198.18.0.1"}, BytesUp: 30, BytesDown: 46}},
	} {
		if got := egressRecord(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("egressRecord(%+v)\n got %+v\nwant %+v", tc.in, got, tc.want)
		}
	}
}
