package daemon

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/gateway"
)

// Unanswered DNS queries log at debug; refused connections at info.
func TestAuditLogLevels(t *testing.T) {
	var buf bytes.Buffer
	audit := auditLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	audit(gateway.Record{Kind: gateway.KindDNS, Host: "nx.example.test", Rule: "nxdomain"})
	if buf.Len() != 0 {
		t.Fatalf("an NXDOMAIN logged at info: %s", buf.String())
	}
	audit(gateway.Record{Kind: gateway.KindTLS, Host: "denied.example.test", Rule: "egress deny denied.example.test"})
	if !strings.Contains(buf.String(), "denied.example.test") {
		t.Fatalf("a refused connection not logged at info: %q", buf.String())
	}
}
