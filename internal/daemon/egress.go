package daemon

import (
	"context"
	"log/slog"

	"github.com/hiloop/hiloop/internal/gateway"
	"github.com/hiloop/hiloop/internal/runtime"
)

// egress gives sandboxes their way out through the gateway, which it serves inside each
// sandbox's own network namespace. It is the sandbox manager's Egress.
type egress struct {
	gw *gateway.Gateway
	rt *runtime.Runtime
}

func (e egress) Attach(_ context.Context, id, name string) error {
	ns, err := e.rt.NetNS(id)
	if err != nil {
		return err
	}
	defer ns.Close()
	return e.gw.Attach(id, name, ns)
}

func (e egress) Detach(id string) { e.gw.Detach(id) }

func (egress) Env() []string { return gateway.ProxyEnv() }

func (egress) Nameserver() string { return "127.0.0.1" }

// auditLog writes the gateway's decisions to the daemon's log: refusals at info, the rest at
// debug. The audit log (egressAudit) keeps them for `hiloop sandbox egress log`.
func auditLog(log *slog.Logger) func(gateway.Record) {
	return func(r gateway.Record) {
		level := slog.LevelDebug
		if !r.Allowed {
			level = slog.LevelInfo
		}
		log.Log(context.Background(), level, "egress", "sandbox", r.Sandbox, "kind", r.Kind, "host", r.Host,
			"port", r.Port, "addr", r.Addr, "allowed", r.Allowed, "rule", r.Rule, "err", r.Err,
			"up", r.BytesUp, "down", r.BytesDown, "duration", r.Duration)
	}
}
