// Package agent makes a sandboxd a node agent of a Kubernetes cluster: it registers the host as
// a Node through virtual-kubelet and runs, as that node's provider, the hiloop sandboxes whose
// placement Pods the scheduler binds to it. It owns, on the API server, only its Node, its
// Lease, the status of the Pods bound to it and the removal of the workspace finalizer of a
// deleted Sandbox whose workspace it held; the Sandboxes' specs and statuses and the Pods
// themselves are the front's and the controller's. On the host it reaches the daemon's
// sandboxes only through Sandboxes, the daemon's own paths; it never touches the store, the
// runtime or the volumes.
package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	vkslog "github.com/virtual-kubelet/virtual-kubelet/log/slog"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hiloop/hiloop/internal/runtime"
	hapi "github.com/hiloop/hiloop/pkg/api"
)

// Sandboxes is what the agent does to its daemon's sandboxes (internal/daemon's agent hook).
// A sandbox is named by its key, which is its Sandbox's metadata.name: "web" for the admin,
// "alice.web" for user alice.
type Sandboxes interface {
	// Create makes and starts the sandbox req.Name (the bare name) for owner, exactly as the
	// hiloop API's create does for that user: the same checks and defaults, secrets, budget.
	Create(ctx context.Context, owner string, req hapi.SandboxesPost) (hapi.Sandbox, error)
	Start(ctx context.Context, key string) (hapi.Sandbox, error)
	// Stop stops the sandbox; its workspace stays.
	Stop(ctx context.Context, key string) (hapi.Sandbox, error)
	// Delete deletes the sandbox with its workspace and its snapshots.
	Delete(ctx context.Context, key string) error
	Get(ctx context.Context, key string) (hapi.Sandbox, error)
	List(ctx context.Context) ([]hapi.Sandbox, error)
	// Exec starts a process in the running sandbox.
	Exec(ctx context.Context, key string, spec runtime.ExecSpec) (runtime.Process, error)
	// DialPort dials port on the running sandbox's loopback.
	DialPort(ctx context.Context, key string, port int) (net.Conn, error)
	// OnChange calls fn with a sandbox's key whenever its state changes or it goes; fn must
	// return at once.
	OnChange(fn func(key string))
}

// InCluster as Config.Kubeconfig uses the Pod's service account (rest.InClusterConfig).
const InCluster = "in-cluster"

// Config is how a node agent runs.
type Config struct {
	// Kubeconfig is the path of the agent's kubeconfig, or InCluster.
	Kubeconfig string
	// NodeName is the Node's name (sandboxd --node-name).
	NodeName string
	// NodeIP is the address the Node advertises (InternalIP), where the API server reaches
	// ServePort.
	NodeIP string
	// ServePort is the port of the node's HTTPS server, which serves the API server's exec,
	// attach, logs and port-forward (the kubelet's port; sandboxd --node-port).
	ServePort int
	// ServeCert is that server's certificate. The API server checks it against its
	// --kubelet-certificate-authority, if it has one.
	ServeCert tls.Certificate
	// ClientCAs verify the API server's client certificate (its --kubelet-client-certificate)
	// on that server (sandboxd --kube-client-ca).
	ClientCAs []byte
	// Capacity is the Node's capacity and allocatable: cpu, memory, ephemeral-storage, pods.
	Capacity corev1.ResourceList
	// Annotations go on the Node: hiloop.dev/endpoint, hiloop.dev/fingerprint,
	// hiloop.dev/ssh-endpoint.
	Annotations map[string]string
	// Version is sandboxd's, reported as the Node's kubelet version.
	Version string
	// Sandboxes are the daemon's.
	Sandboxes Sandboxes
	Log       *slog.Logger
}

// Agent is a running node agent.
type Agent struct {
	cfg       Config
	log       *slog.Logger
	client    kubernetes.Interface
	dyn       dynamic.Interface
	sandboxes *sandboxWatch
	provider  *provider
}

// RestConfig is the client configuration kubeconfig names (or InCluster).
func RestConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == InCluster {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

// New checks cfg and makes the agent's clients; Run registers the node and serves.
func New(cfg Config) (*Agent, error) {
	rc, err := RestConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", cfg.Kubeconfig, err)
	}
	rc.UserAgent = "hiloop-agent/" + cfg.Version
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	if cfg.NodeName == "" || cfg.NodeIP == "" || cfg.ServePort == 0 || cfg.Sandboxes == nil {
		return nil, errors.New("agent: node name, node IP, port and sandboxes are required")
	}
	if len(cfg.ServeCert.Certificate) == 0 {
		return nil, errors.New("agent: no serving certificate for the node's port")
	}
	if len(cfg.ClientCAs) == 0 {
		return nil, errors.New("agent: no CA to verify the API server's client certificate (--kube-client-ca)")
	}
	a := &Agent{cfg: cfg, log: cfg.Log.With("component", "agent", "node", cfg.NodeName), client: client, dyn: dyn}
	a.sandboxes = newSandboxWatch(a)
	a.provider = newProvider(a)
	return a, nil
}

// Run registers the node, serves its port and runs the Pods bound to it until ctx ends, or
// returns the error that stopped it.
func (a *Agent) Run(ctx context.Context) error {
	logger := vkslog.FromSlog(a.log)
	ctx = vklog.WithLogger(ctx, logger)
	// The Sandboxes first: a Pod's create reads its Sandbox.
	if err := a.sandboxes.start(ctx); err != nil {
		return err
	}
	caProvider, err := dynamiccertificates.NewStaticCAContent("kube-client-ca", a.cfg.ClientCAs)
	if err != nil {
		return fmt.Errorf("--kube-client-ca: %w", err)
	}
	auth, err := nodeutil.WebhookAuth(a.client, a.cfg.NodeName, func(c *nodeutil.WebhookAuthConfig) error {
		c.AuthnConfig.ClientCertificateCAContentProvider = caProvider
		return nil
	})
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(a.cfg.ClientCAs)
	mux := http.NewServeMux()
	n, err := nodeutil.NewNode(a.cfg.NodeName, func(pc nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
		a.describeNode(pc.Node)
		a.provider.pods = pc.Pods
		return a.provider, nil, nil
	},
		nodeutil.WithClient(noReferencesClient{a.client}),
		nodeutil.AttachProviderRoutes(mux),
		nodeutil.WithTLSConfig(func(c *tls.Config) error {
			c.Certificates = []tls.Certificate{a.cfg.ServeCert}
			// Anyone may connect; only a verified certificate or token is let through (auth).
			c.ClientAuth = tls.VerifyClientCertIfGiven
			c.ClientCAs = pool
			return nil
		}),
		func(c *nodeutil.NodeConfig) error {
			c.HTTPListenAddr = net.JoinHostPort("", strconv.Itoa(a.cfg.ServePort))
			c.Handler = api.InstrumentHandler(nodeutil.WithAuth(auth, mux))
			// A placement Pod has no environment to resolve (see noReferencesClient).
			c.SkipDownwardAPIResolution = true
			c.NumWorkers = 4
			c.InformerResyncPeriod = time.Minute
			return nil
		},
	)
	if err != nil {
		return err
	}
	// After NewNode, whose look for a kubeconfig in the environment (unused: it has the
	// agent's client) would log a warning.
	vklog.L = logger
	go a.provider.run(ctx)
	go func() {
		select {
		case <-n.Ready():
			if err := a.ensureNodeMeta(ctx); err != nil {
				a.log.Error("node labels, annotations and taint", "err", err)
			}
			// The Pod cache is filled now: a sandbox that lost its Pod meanwhile stops.
			if err := a.provider.stopOrphans(ctx); err != nil {
				a.log.Error("stop the sandboxes that lost their Pods", "err", err)
			}
			a.log.Info("node ready", "ip", a.cfg.NodeIP, "port", a.cfg.ServePort)
		case <-n.Done():
		}
	}()
	return n.Run(ctx)
}

// ResourceList is the capacity of a node as the flags and the host give it.
func ResourceList(cpus float64, memoryBytes, storageBytes int64, pods int) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(int64(cpus*1000), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(memoryBytes, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(storageBytes, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(int64(pods), resource.DecimalSI),
	}
}
