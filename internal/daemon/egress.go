package daemon

import (
	"context"
	"log/slog"

	"github.com/hiloop/hiloop/internal/gateway"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/pkg/api"
)

// egress gives sandboxes their way out through the gateway, which it serves inside each
// sandbox's own network namespace. It is the sandbox manager's Egress.
type egress struct {
	gw *gateway.Gateway
	rt *runtime.Runtime
}

func (e egress) Attach(_ context.Context, id, name string, policy api.Egress) error {
	hp, err := hostPolicy(policy)
	if err != nil {
		return err
	}
	ns, err := e.rt.NetNS(id)
	if err != nil {
		return err
	}
	defer ns.Close()
	return e.gw.Attach(id, name, ns, hp)
}

func (e egress) SetPolicy(id string, policy api.Egress) error {
	hp, err := hostPolicy(policy)
	if err != nil {
		return err
	}
	e.gw.SetPolicy(id, hp)
	return nil
}

// hostPolicy is a sandbox's egress policy as the gateway applies it. The rules were validated
// at the API's edge; one the gateway cannot read is an error rather than a rule left out, which
// could open a closed sandbox wider than asked.
func hostPolicy(p api.Egress) (*gateway.HostPolicy, error) {
	hp := &gateway.HostPolicy{Closed: p.Mode == api.EgressClosed}
	for _, list := range []struct {
		in  []string
		out *[]gateway.HostRule
	}{{p.Allow, &hp.Allow}, {p.Deny, &hp.Deny}} {
		for _, s := range list.in {
			r, err := gateway.ParseHostRule(s)
			if err != nil {
				return nil, err
			}
			*list.out = append(*list.out, r)
		}
	}
	return hp, nil
}

func (e egress) Detach(id string) { e.gw.Detach(id) }

func (egress) Env() []string { return gateway.ProxyEnv() }

func (egress) Nameserver() string { return "127.0.0.1" }

// auditLog writes the gateway's decisions to the daemon's log: refusals at info, the rest at
// debug. The audit log (egressAudit) keeps them for `hiloop sandbox egress log`.
func auditLog(log *slog.Logger) func(gateway.Record) {
	return func(r gateway.Record) {
		level := slog.LevelDebug
		// A DNS query not answered (NXDOMAIN, SERVFAIL) is no connection refused: a sandbox
		// can ask many, and an info line each would be written synchronously.
		if !r.Allowed && r.Kind != gateway.KindDNS {
			level = slog.LevelInfo
		}
		log.Log(context.Background(), level, "egress", "sandbox", r.Sandbox, "kind", r.Kind, "host", r.Host,
			"port", r.Port, "addr", r.Addr, "allowed", r.Allowed, "rule", r.Rule, "err", r.Err,
			"up", r.BytesUp, "down", r.BytesDown, "duration", r.Duration)
	}
}
