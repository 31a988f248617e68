package daemon

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	goruntime "runtime"
	"strconv"
	"syscall"

	corev1 "k8s.io/api/core/v1"

	"github.com/hiloop/hiloop/internal/cluster/agent"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/sandbox"
	"github.com/hiloop/hiloop/pkg/api"
	hv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// AgentConfig makes sandboxd a node agent of a Kubernetes cluster (internal/cluster/agent):
// sandboxd --kubeconfig and the --node-* flags.
type AgentConfig struct {
	// Kubeconfig is the agent's kubeconfig file, or agent.InCluster.
	Kubeconfig string
	// NodeName is the Node's name (default: the host's name).
	NodeName string
	// NodeIP is the InternalIP the Node advertises (default: the host's first address that is
	// not loopback).
	NodeIP string
	// NodePort is the port of the node's HTTPS server, where the API server sends kubectl exec,
	// logs and port-forward.
	NodePort int
	// NodeCertFile and NodeKeyFile are that server's certificate and key (PEM); empty: the
	// TLS listener's (--listen) certificate.
	NodeCertFile, NodeKeyFile string
	// KubeClientCAFile holds the CA certificates that sign the API server's client certificate
	// for kubelets (its --kubelet-client-certificate).
	KubeClientCAFile string
	// CPUs, MemoryBytes and Pods replace the host's capacity the Node advertises when not 0.
	CPUs        float64
	MemoryBytes int64
	Pods        int
}

// DefaultNodePort is the kubelet's port, the node agent's by default.
const DefaultNodePort = 10250

// defaultNodePods is how many placement Pods a node takes unless --node-pods says.
const defaultNodePods = 110

// checkAgentFlags validates the node agent's flags before anything starts.
func checkAgentFlags(cfg Config) error {
	a := cfg.Agent
	if a == nil {
		return nil
	}
	var errs []error
	if cfg.Listen == "" {
		errs = append(errs, errors.New("--kubeconfig needs --listen: the front reaches a node agent's sandboxes on its TLS listener, which its Node names (hiloop.dev/endpoint)"))
	}
	if a.KubeClientCAFile == "" {
		errs = append(errs, errors.New("--kubeconfig needs --kube-client-ca: the CA of the API server's client certificate, without which no kubectl exec, logs or port-forward can be let through"))
	}
	if a.NodeIP != "" {
		if _, err := netip.ParseAddr(a.NodeIP); err != nil {
			errs = append(errs, fmt.Errorf("invalid --node-ip %q: want an IP address", a.NodeIP))
		}
	}
	if a.NodePort <= 0 || a.NodePort > 65535 {
		errs = append(errs, fmt.Errorf("invalid --node-port %d: use 1 to 65535", a.NodePort))
	}
	if (a.NodeCertFile == "") != (a.NodeKeyFile == "") {
		errs = append(errs, errors.New("--node-tls-cert and --node-tls-key go together"))
	}
	if a.CPUs < 0 || a.MemoryBytes < 0 || a.Pods < 0 {
		errs = append(errs, errors.New("--node-cpus, --node-memory-mib and --node-pods cannot be negative"))
	}
	return errors.Join(errs...)
}

// startAgent makes the daemon a node agent, as cfg.Agent says; the TLS listener must be
// serving (its endpoint and fingerprint go on the Node). It returns at once; the agent runs
// until ctx ends, and its end is sent to errc.
func (d *Daemon) startAgent(ctx context.Context, errc chan<- error) error {
	ac := d.cfg.Agent
	caPEM, err := os.ReadFile(ac.KubeClientCAFile)
	if err != nil {
		return fmt.Errorf("--kube-client-ca: %w", err)
	}
	cert := d.tls.Cert
	if ac.NodeCertFile != "" {
		if cert, err = tls.LoadX509KeyPair(ac.NodeCertFile, ac.NodeKeyFile); err != nil {
			return fmt.Errorf("--node-tls-cert: %w", err)
		}
	}
	name := cmp.Or(ac.NodeName, hostName())
	ip := ac.NodeIP
	if ip == "" {
		if ip, err = hostIP(); err != nil {
			return err
		}
	}
	capacity, err := d.nodeCapacity(ac)
	if err != nil {
		return err
	}
	annotations := map[string]string{
		hv1.AnnotationEndpoint:    "https://" + d.advertisedListen(ip),
		hv1.AnnotationFingerprint: d.tls.Fingerprint,
	}
	if d.sshEndpoint != "" {
		annotations[hv1.AnnotationSSHEndpoint] = d.sshEndpoint
	}
	a, err := agent.New(agent.Config{
		Kubeconfig:  ac.Kubeconfig,
		NodeName:    name,
		NodeIP:      ip,
		ServePort:   ac.NodePort,
		ServeCert:   cert,
		ClientCAs:   caPEM,
		Capacity:    capacity,
		Annotations: annotations,
		Version:     d.cfg.Version,
		Sandboxes:   agentSandboxes{d},
		Log:         d.log,
	})
	if err != nil {
		return err
	}
	go func() {
		err := a.Run(ctx)
		if ctx.Err() == nil {
			errc <- fmt.Errorf("node agent: %w", err)
		}
	}()
	return nil
}

// advertisedListen is the TLS listener's HOST:PORT as another machine reaches it: its own
// address, or the node's IP when it listens on every address.
func (d *Daemon) advertisedListen(nodeIP string) string {
	host, port, err := net.SplitHostPort(d.tlsEndpoint)
	if err != nil {
		return d.tlsEndpoint
	}
	if lh, _, err := net.SplitHostPort(d.cfg.Listen); err == nil {
		if a, err := netip.ParseAddr(lh); lh == "" || err == nil && a.IsUnspecified() {
			host = nodeIP
		}
	}
	return net.JoinHostPort(host, port)
}

// nodeCapacity is what the Node offers: the host's CPUs and memory (or the flags'), the
// storage the volume pool can promise, and the Pods the flag allows.
func (d *Daemon) nodeCapacity(ac *AgentConfig) (corev1.ResourceList, error) {
	cpus := ac.CPUs
	if cpus == 0 {
		cpus = float64(goruntime.NumCPU())
	}
	mem := ac.MemoryBytes
	if mem == 0 {
		total, err := d.host.memTotal()
		if err != nil {
			return nil, err
		}
		mem = int64(total)
	}
	storage, err := d.storageCapacity()
	if err != nil {
		return nil, err
	}
	return agent.ResourceList(cpus, mem, storage, cmp.Or(ac.Pods, defaultNodePods)), nil
}

// storageCapacity is what the volume pool can promise: what it holds and could still hold,
// times the overcommit; the data dir's filesystem for a pool that cannot say.
func (d *Daemon) storageCapacity() (int64, error) {
	if s, ok := d.volumes.(sandbox.Storage); ok {
		free, err1 := s.FreeBytes()
		held, err2 := s.HeldBytes()
		if err := errors.Join(err1, err2); err != nil {
			return 0, fmt.Errorf("volume pool capacity: %w", err)
		}
		return int64(float64(free+held) * cmp.Or(d.cfg.Overcommit, 1)), nil
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.cfg.DataDir, &st); err != nil {
		return 0, fmt.Errorf("data dir capacity: %w", err)
	}
	return int64(st.Blocks) * st.Bsize, nil
}

// hostIP is the host's first address that is not loopback, IPv4 first.
func hostIP() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	var v6 string
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
			continue
		}
		if n.IP.To4() != nil {
			return n.IP.String(), nil
		}
		if v6 == "" {
			v6 = n.IP.String()
		}
	}
	if v6 == "" {
		return "", errors.New("the host has no address but loopback: pass --node-ip")
	}
	return v6, nil
}

// agentSandboxes is the node agent's hook into the daemon: the same paths as the API's.
type agentSandboxes struct{ d *Daemon }

func (s agentSandboxes) Create(ctx context.Context, owner string, req api.SandboxesPost) (api.Sandbox, error) {
	return s.d.create(ctx, owner, req)
}

func (s agentSandboxes) Start(ctx context.Context, key string) (api.Sandbox, error) {
	return s.d.sandboxes.Start(ctx, key)
}

func (s agentSandboxes) Stop(ctx context.Context, key string) (api.Sandbox, error) {
	return s.d.sandboxes.Stop(ctx, key)
}

func (s agentSandboxes) Delete(ctx context.Context, key string) error {
	return s.d.sandboxes.Delete(ctx, key, true)
}

func (s agentSandboxes) Get(ctx context.Context, key string) (api.Sandbox, error) {
	return s.d.sandboxes.Get(ctx, key)
}

func (s agentSandboxes) List(ctx context.Context) ([]api.Sandbox, error) {
	return s.d.sandboxes.List(ctx)
}

func (s agentSandboxes) Exec(ctx context.Context, key string, spec runtime.ExecSpec) (runtime.Process, error) {
	return s.d.sandboxes.Exec(ctx, key, spec)
}

func (s agentSandboxes) DialPort(ctx context.Context, key string, port int) (net.Conn, error) {
	return s.d.sandboxes.DialLoopback(ctx, key, net.JoinHostPort("localhost", strconv.Itoa(port)))
}

func (s agentSandboxes) OnChange(fn func(key string)) { s.d.sandboxes.OnChange(fn) }
