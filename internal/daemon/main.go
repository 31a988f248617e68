package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/internal/gateway"
	"github.com/hiloop/hiloop/internal/runtime"
)

// Version is set at build time with -ldflags "-X github.com/hiloop/hiloop/internal/daemon.Version=...".
var Version = "dev"

// Defaults an operator can override with flags.
const (
	DefaultDataDir = "/var/lib/sandboxd"
	DefaultSocket  = "/run/sandboxd/sandboxd.sock"
)

// Main runs sandboxd and returns its exit code. It is also the sandbox's container init when
// re-executed by the runtime.
func Main() int {
	runtime.MaybeInit()
	cfg := Config{Version: Version}
	var logLevel string
	var addrs addressFlags
	var allowCIDRs, upstreamCAs, sandboxCAFiles []string
	var eventLimits func() error
	agentCfg := AgentConfig{NodePort: DefaultNodePort}
	var cluster bool
	frontCfg := FrontConfig{Namespace: DefaultClusterNamespace, DefaultUserNamespace: DefaultDefaultUserNamespace}
	var nodeMemoryMiB int64
	cmd := &cobra.Command{
		Use:           "sandboxd",
		Short:         "Run the hiloop sandbox daemon",
		Long:          "sandboxd runs isolated Linux sandboxes on this host and serves the hiloop API on a unix socket.",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Every flag is checked before anything is made or served, and every bad one is said
			// at once.
			var level slog.Level
			var errs []error
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				errs = append(errs, fmt.Errorf("invalid --log-level %q: use debug, info, warn or error", logLevel))
			}
			cfg.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			errs = append(errs, eventLimits(), addrs.apply(&cfg), checkTLSFlags(cfg))
			if cluster {
				// A front runs no sandbox: none of the host's flags apply, and it needs no root.
				frontCfg.Kubeconfig = agentCfg.Kubeconfig
				cfg.Front = &frontCfg
				if err := errors.Join(append(errs, checkFrontFlags(cfg))...); err != nil {
					return err
				}
				ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
				defer stop()
				return RunFront(ctx, cfg)
			}
			if agentCfg.Kubeconfig != "" {
				agentCfg.MemoryBytes = nodeMemoryMiB << 20
				cfg.Agent = &agentCfg
			}
			errs = append(errs, checkAgentFlags(cfg))
			for _, c := range allowCIDRs {
				prefix, err := netip.ParsePrefix(c)
				if err != nil {
					errs = append(errs, fmt.Errorf("invalid --egress-allow-cidr %q: want an address range such as 10.1.0.0/16", c))
					continue
				}
				if err := gateway.CheckAllowCIDR(prefix); err != nil {
					errs = append(errs, fmt.Errorf("invalid --egress-allow-cidr %q: %w", c, err))
					continue
				}
				cfg.EgressAllowCIDRs = append(cfg.EgressAllowCIDRs, prefix.Masked())
			}
			errs = append(errs, checkOvercommit(cfg.Overcommit), checkSpares(cfg.Spares))
			var err error
			cfg.GatewayUpstreamCAs, err = upstreamPool(upstreamCAs)
			errs = append(errs, err)
			cfg.SandboxCAs, err = sandboxCAs(sandboxCAFiles)
			errs = append(errs, err)
			// Before anything is mounted: a budget the descriptors cannot carry is the operator's to fix.
			cfg.GatewayMaxConns, err = gatewayMaxConns(cfg.GatewayMaxConns, fileLimit())
			errs = append(errs, err)
			if err := errors.Join(errs...); err != nil {
				return err
			}
			if cfg.InitPath == "" {
				cfg.InitPath, err = findInit()
			} else {
				cfg.InitPath, err = filepath.Abs(cfg.InitPath)
			}
			if err != nil {
				return err
			}
			if cfg.FakeAgentPath == "" {
				cfg.FakeAgentPath = findTool("hiloop-fake-agent", cfg.InitPath)
			} else if cfg.FakeAgentPath, err = filepath.Abs(cfg.FakeAgentPath); err != nil {
				return err
			}
			if os.Geteuid() != 0 {
				return errors.New("sandboxd must run as root (it creates namespaces, cgroups and mounts)")
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			d, err := New(ctx, cfg)
			if err != nil {
				return err
			}
			defer d.Close()
			return d.Serve(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", DefaultDataDir, "directory for the database, images, volumes and runtime state")
	f.StringVar(&addrs.socket, "socket", DefaultSocket, "unix socket to serve the API on")
	f.StringVar(&addrs.listen, "listen", "", "also serve the API over HTTPS on this TCP address, HOST:PORT, with a certificate sandboxd makes and keeps in <data-dir>/tls (its fingerprint logged at start), or --tls-cert's; users authenticate with a client certificate or an API token (port 0: any free port, logged)")
	f.StringVar(&addrs.insecureListen, "insecure-listen", "", "also serve the API over plain HTTP on this TCP address, HOST:PORT: anyone on the path reads every credential and every byte of every exec; only behind a proxy that adds TLS or on a path you trust (users authenticate with an API token)")
	f.StringVar(&cfg.TLSCertFile, "tls-cert", "", "serve this certificate (PEM, the leaf first, then any intermediates) on --listen instead of the one sandboxd makes; with --tls-key")
	f.StringVar(&cfg.TLSKeyFile, "tls-key", "", "the key of --tls-cert (PEM)")
	f.StringVar(&cfg.FrontCAFile, "front-ca", "", "as a cluster's node agent: a PEM file of the CAs whose client certificates identify the cluster's fronts; a front's request on --listen acts as the user it names")
	f.StringArrayVar(&addrs.tlsSANs, "tls-san", nil, "a host name or IP address the certificate sandboxd makes for --listen is good for, besides the host's name and addresses and localhost (repeatable; one it lacks makes a new certificate, which clients must trust again)")
	f.StringVar(&cfg.VolumeDriver, "volume-driver", "xfs", "workspace volume driver: xfs (growable sparse images) or dir (plain directories)")
	f.Float64Var(&cfg.Overcommit, "overcommit", 1, fmt.Sprintf("let the workspaces, root filesystems and snapshots be promised this many times the storage the host can hold (%g-%g; 1: no overcommit; below 1 keeps a reserve)", minOvercommit, maxOvercommit))
	f.StringVar(&cfg.ImagesDir, "images-dir", "", "directory of built images (default <data-dir>/images)")
	f.StringVar(&cfg.InitPath, "init-path", "", "the static hiloop-init binary (default: next to sandboxd, then $PATH)")
	f.StringVar(&cfg.FakeAgentPath, "fake-agent-path", "", "the static hiloop-fake-agent binary of the fake harness (default: next to hiloop-init, next to sandboxd, then $PATH)")
	f.StringVar(&addrs.sshListen, "ssh-listen", "", "turn on the managed SSH endpoint at this address, HOST:PORT, e.g. 127.0.0.1:2222 (off by default; port 0: any free port)")
	f.StringVar(&addrs.sshAdvertise, "ssh-advertise", "", "where clients on other machines reach the SSH endpoint, HOST:PORT, e.g. when a port is forwarded to it (default: --ssh-listen's address and port, the host's name for 0.0.0.0 or [::])")
	f.IntVar(&cfg.Spares, "spares", DefaultSpares, "keep this many sandboxes started ahead of need, of the image the last create used (at first the default image): a create with the default limits takes one and is ready in milliseconds (0: none; each costs an idle sandbox's memory, ~3 MiB)")
	f.DurationVar(&cfg.ExecKeepalive, "exec-keepalive", DefaultExecKeepalive, "ping an exec's client this often; one that leaves three in a row unanswered (gone without closing its connection) has its command killed")
	f.StringArrayVar(&addrs.gatewayResolve, "gateway-resolve", nil, "send sandboxes' connections for HOST:PORT to ADDR:PORT, as curl's --resolve (repeatable; HOST:PORT=ADDR:PORT; allowed even to the host's loopback)")
	f.StringArrayVar(&upstreamCAs, "gateway-upstream-ca", nil, "also trust the CA certificates in this PEM file, besides the host's, to verify hosts whose TLS the gateway terminates (repeatable)")
	f.StringArrayVar(&sandboxCAFiles, "sandbox-ca", nil, "have every sandbox trust the CA certificates in this PEM file from its next start, besides its image's (repeatable); for a host whose way out re-signs TLS, "+hostBundle+" makes sandboxes trust what the host trusts")
	f.IntVar(&cfg.GatewayMaxConns, "gateway-max-conns", 0, fmt.Sprintf("bound the egress gateway's connections of all sandboxes together (0: what half of the process's file descriptor limit carries at %d each, at most %d; a sandbox holds at most half, and is sure of %d)",
		gateway.ConnFDs, gateway.MaxDefaultBudget, gateway.DefaultConnReserve))
	f.StringArrayVar(&allowCIDRs, "egress-allow-cidr", nil, "let sandboxes reach this range although it is denied by default, e.g. a private network; never the host's own addresses, and no range may cover its loopback (repeatable)")
	f.StringArrayVar(&addrs.providerURLs, "provider-url", nil, "send a provider's requests to this URL instead: anthropic=URL, openai=URL (the model route), chatgpt=URL (the ChatGPT backend's host, where Codex with a ChatGPT login is sent: by default https://chatgpt.com, the path /backend-api/codex/… kept), chatgpt-token=URL (where ChatGPT logins are refreshed); repeatable")
	f.StringVar(&cfg.MasterKeyFile, "master-key-file", "", "the 32-byte key that seals the secrets (default <data-dir>/master.key, created on first start; back it up)")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	eventLimits = addEventLimitFlags(f, &cfg.EventLimits)
	f.BoolVar(&cluster, "cluster", false, "run as a Kubernetes cluster's front: serve the hiloop API on --listen over the cluster's Sandbox and User resources (--kubeconfig's cluster, or in-cluster), and route calls on a sandbox to the node agent holding it; no sandbox runs here, and nothing is kept on disk")
	f.StringVar(&frontCfg.Namespace, "cluster-namespace", DefaultClusterNamespace, "with --cluster: the front's own namespace, where its TLS identity (Secret hiloop-front, ConfigMap hiloop-front-ca) and the controller's Lease live")
	f.StringVar(&frontCfg.DefaultUserNamespace, "default-user-namespace", DefaultDefaultUserNamespace, "with --cluster: the Kubernetes namespace of the sandboxes of a user added without one")
	f.StringVar(&agentCfg.Kubeconfig, "kubeconfig", "", "run as a node agent of the Kubernetes cluster this kubeconfig reaches (\"in-cluster\": the Pod's service account): register this host as a Node and run the sandboxes whose Pods are bound to it (empty: not a node agent)")
	f.StringVar(&agentCfg.NodeName, "node-name", "", "the node agent's Node name (default: the host's name)")
	f.StringVar(&agentCfg.NodeIP, "node-ip", "", "the address the node agent's Node advertises (InternalIP), where the API server reaches --node-port (default: the host's first address that is not loopback)")
	f.IntVar(&agentCfg.NodePort, "node-port", DefaultNodePort, "the node agent's HTTPS port, where the API server sends kubectl exec, logs and port-forward (the kubelet's port)")
	f.StringVar(&agentCfg.NodeCertFile, "node-tls-cert", "", "serve this certificate (PEM) on --node-port instead of --listen's: one the API server's --kubelet-certificate-authority trusts; with --node-tls-key")
	f.StringVar(&agentCfg.NodeKeyFile, "node-tls-key", "", "the key of --node-tls-cert (PEM)")
	f.StringVar(&agentCfg.KubeClientCAFile, "kube-client-ca", "", "the CA certificates (PEM) of the API server's client certificate for kubelets (its --kubelet-client-certificate); required with --kubeconfig")
	f.Float64Var(&agentCfg.CPUs, "node-cpus", 0, "the CPUs the node agent's Node offers (default: the host's)")
	f.Int64Var(&nodeMemoryMiB, "node-memory-mib", 0, "the memory the node agent's Node offers, in MiB (default: the host's)")
	f.IntVar(&agentCfg.Pods, "node-pods", 0, fmt.Sprintf("how many sandboxes the node agent's Node runs at once (default %d)", defaultNodePods))
	if err := cmd.Execute(); err != nil {
		// One line each for the errors joined (every bad flag).
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(os.Stderr, "sandboxd:", line)
		}
		return 1
	}
	return 0
}

// DefaultSpares is how many spare sandboxes a daemon keeps unless --spares says; MaxSpares
// bounds --spares.
const (
	DefaultSpares = 1
	MaxSpares     = 64
)

// Bounds of --overcommit.
const (
	minOvercommit = 0.1
	maxOvercommit = 100.0
)

// checkOvercommit validates --overcommit.
func checkOvercommit(v float64) error {
	if !(v >= minOvercommit && v <= maxOvercommit) { // also NaN
		return fmt.Errorf("invalid --overcommit %g: use %g to %g (1: promise no more storage than the host has)", v, minOvercommit, maxOvercommit)
	}
	return nil
}

// checkSpares validates --spares.
func checkSpares(n int) error {
	if n < 0 || n > MaxSpares {
		return fmt.Errorf("invalid --spares %d: use 0 to %d", n, MaxSpares)
	}
	return nil
}

// findTool looks for an optional helper binary next to hiloop-init, next to the running binary,
// then in $PATH; "" if it is nowhere.
func findTool(name, initPath string) string {
	dirs := []string{filepath.Dir(initPath)}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	return ""
}

// findInit looks for hiloop-init next to the running binary, then in $PATH.
func findInit() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "hiloop-init")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("hiloop-init"); err == nil {
		return filepath.Abs(p)
	}
	return "", errors.New("hiloop-init not found next to sandboxd or in $PATH: build it with `make build` or pass --init-path")
}
