package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"github.com/hiloop/hiloop/internal/gateway"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/secrets"
	"github.com/hiloop/hiloop/pkg/api"
)

// egress gives sandboxes their way out through the gateway, which it serves inside each
// sandbox's own network namespace. It is the sandbox manager's Egress.
type egress struct {
	gw      *gateway.Gateway
	rt      *runtime.Runtime
	secrets *secrets.Store
	cas     []byte // PEM: trusted inside every sandbox besides its image's (the gateway's CA first)
	log     *slog.Logger
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
	if err := e.gw.Attach(id, name, ns, hp); err != nil {
		return err
	}
	e.gw.SetSecrets(id, secretBindings(e.secrets, id, e.log.Error))
	return nil
}

// Prepare makes the capture of the spare sandbox id ahead of its Attach.
func (e egress) Prepare(_ context.Context, id string) error {
	ns, err := e.rt.NetNS(id)
	if err != nil {
		return err
	}
	defer ns.Close()
	return e.gw.Prepare(id, ns)
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

// Env is the proxy variables, the trust store's, and the placeholders of the secrets attached
// to the sandbox id. Clients that read their own roots (Node, Python's requests, curl and git
// builds with another TLS library) are pointed at the system bundle the runtime writes with the
// gateway's CA (and --sandbox-ca's) in it; Node adds the file of those alone to its built-in
// roots. A secrets store that cannot
// be read leaves the placeholders out (the process runs, its secrets do not work) rather than
// failing every exec.
func (e egress) Env(id string) []string {
	env := gateway.ProxyEnv()
	if len(e.cas) > 0 {
		env = append(env,
			"NODE_EXTRA_CA_CERTS="+runtime.ExtraCAPath,
			"SSL_CERT_FILE="+runtime.CABundlePath,
			"REQUESTS_CA_BUNDLE="+runtime.CABundlePath,
			"CURL_CA_BUNDLE="+runtime.CABundlePath,
			"GIT_SSL_CAINFO="+runtime.CABundlePath,
		)
	}
	if e.secrets == nil {
		return env
	}
	sec, err := secretEnv(e.secrets, id)
	if err != nil {
		e.log.Error("read the secrets of a sandbox", "id", id, "err", err)
	}
	return append(env, sec...)
}

func (egress) Nameserver() string { return "127.0.0.1" }

func (e egress) CACerts() []byte { return e.cas }

// upstreamPool is what the gateway verifies the real hosts of terminated connections against:
// the host's system roots and the CAs in files (--gateway-upstream-ca). nil without files, which
// leaves the host's trust store alone.
func upstreamPool(files []string) (*x509.CertPool, error) {
	if len(files) == 0 {
		return nil, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		// No system roots to add to: the gateway still tries the host's store on its own.
		pool = x509.NewCertPool()
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--gateway-upstream-ca: %w", err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--gateway-upstream-ca: %s holds no PEM certificate", f)
		}
	}
	return pool, nil
}

// gatewayMaxConns is the bound on the gateway's connections of all sandboxes together for a
// daemon that may hold nofile descriptors: n (--gateway-max-conns) when it is set, else
// gateway.DefaultBudget. A bound the descriptors cannot carry is an error rather than a
// daemon that runs out of them under load.
func gatewayMaxConns(n int, nofile uint64) (int, error) {
	most := gateway.MaxBudget(nofile)
	switch {
	case n == 0:
		return gateway.DefaultBudget(nofile), nil
	case n < 0:
		return 0, fmt.Errorf("invalid --gateway-max-conns %d: want a number of connections, or 0 for the default (%d here)", n, gateway.DefaultBudget(nofile))
	case n > most:
		return 0, fmt.Errorf("--gateway-max-conns %d is more than this process can carry: each connection may hold %d file descriptors and sandboxd keeps %d for itself, "+
			"but its limit (RLIMIT_NOFILE) is %d, which allows %d; raise the limit (LimitNOFILE= in a systemd unit, ulimit -n) or lower the flag",
			n, gateway.ConnFDs, gateway.MinDaemonFDs, nofile, most)
	}
	return n, nil
}

// fileLimit is the process's descriptor limit (RLIMIT_NOFILE). Go raises the soft limit to the
// hard one at start, so the soft one is what the daemon has.
func fileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 1024 // the usual soft limit, which Go would have raised if it could
	}
	return r.Cur
}

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
