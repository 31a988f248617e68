// Package daemon wires sandboxd: it opens the store, builds the sandbox manager over the runtime
// and volume driver, reconciles, and serves the HTTP API on a unix socket and optionally on TCP.
// Routes are declared as one table in routes.go; handlers translate between pkg/api and the
// manager and hold no state of their own.
package daemon

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/auditlog"
	"github.com/hiloop/hiloop/internal/cluster/front"
	"github.com/hiloop/hiloop/internal/egresslog"
	"github.com/hiloop/hiloop/internal/eventlog"
	"github.com/hiloop/hiloop/internal/gateway"
	"github.com/hiloop/hiloop/internal/handoff"
	"github.com/hiloop/hiloop/internal/harness"
	"github.com/hiloop/hiloop/internal/harness/fake"
	"github.com/hiloop/hiloop/internal/logins"
	"github.com/hiloop/hiloop/internal/modelroute"
	"github.com/hiloop/hiloop/internal/netcopy"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/sandbox"
	"github.com/hiloop/hiloop/internal/secrets"
	"github.com/hiloop/hiloop/internal/session"
	"github.com/hiloop/hiloop/internal/sshd"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/usage"
	"github.com/hiloop/hiloop/internal/users"
	"github.com/hiloop/hiloop/internal/volume"
	"github.com/hiloop/hiloop/pkg/api"
)

// Config is how an operator runs sandboxd.
type Config struct {
	// DataDir holds the bbolt file and everything else the daemon owns.
	DataDir string
	// Socket is the unix socket the API is served on (mode 0660).
	Socket string
	// Listen is an optional TCP address the API is served on over TLS (--listen), with the
	// daemon's own certificate or TLSCertFile's; a request there acts as the user of its
	// client certificate or API token (authenticator).
	Listen string
	// InsecureListen is an optional TCP address the API is served on in plain HTTP
	// (--insecure-listen), for a path the operator trusts.
	InsecureListen string
	// TLSCertFile and TLSKeyFile are an operator's certificate (PEM, the leaf first) and key
	// for the TLS listener (--tls-cert, --tls-key); empty: the daemon makes its own, kept in
	// <DataDir>/tls.
	TLSCertFile, TLSKeyFile string
	// TLSSANs are names and addresses the daemon's own certificate is good for besides the
	// host's (--tls-san), lower-case names and addresses in their usual form.
	TLSSANs []string
	// FrontCAFile is a PEM file of the CAs whose client certificates identify a cluster's
	// fronts (--front-ca): on the TLS listener, a request with one acts as the user it names
	// in api.FrontUserHeader. Empty: no front reaches this daemon.
	FrontCAFile string
	// VolumeDriver is "xfs" (sparse XFS images, growable) or "dir" (plain directories, fixed).
	VolumeDriver string
	// Overcommit is how many times the storage the host can hold the promised capacity of
	// workspaces, root filesystems and snapshots may be (--overcommit); 0 means 1, none.
	Overcommit float64
	// ImagesDir holds built images; empty means <DataDir>/images.
	ImagesDir string
	// InitPath is the static hiloop-init binary every sandbox runs as PID 1.
	InitPath string
	// FakeAgentPath is the static hiloop-fake-agent binary, mounted into every sandbox for the
	// fake harness; empty leaves it out.
	FakeAgentPath string
	// SSHListen turns the managed SSH endpoint on at this TCP address; empty leaves it off.
	SSHListen string
	// SSHAdvertise is where clients on other machines reach the SSH endpoint, HOST:PORT
	// (--ssh-advertise); empty: from SSHListen (sshEndpoint).
	SSHAdvertise string
	// GatewayRoutes send a host and port to another address, for every sandbox (tests, split
	// horizons): --gateway-resolve.
	GatewayRoutes []gateway.Route
	// EgressAllowCIDRs are ranges sandboxes may reach although they are denied by default
	// (private, link-local): --egress-allow-cidr. They never open the host's own addresses,
	// and a range covering its loopback stops the start (gateway.CheckAllowCIDR).
	EgressAllowCIDRs []netip.Prefix
	// MasterKeyFile holds the key that seals the secrets; empty means <DataDir>/master.key,
	// created on first start: --master-key-file.
	MasterKeyFile string
	// SandboxCAs are PEM certificates every sandbox trusts from its next start, besides its
	// image's and the gateway's CA: --sandbox-ca.
	SandboxCAs []byte
	// GatewayUpstreamCAs verify the real host of a connection the gateway terminates: the
	// host's system roots plus the CAs of --gateway-upstream-ca (tests, private CAs). nil: the
	// host's trust store alone.
	GatewayUpstreamCAs *x509.CertPool
	// ProviderURLs replace the default upstreams by name (ProviderURLNames): --provider-url.
	ProviderURLs map[string]*url.URL
	// GatewayMaxConns bounds the gateway's connections of all sandboxes together
	// (--gateway-max-conns); 0: derived from the process's descriptor limit.
	GatewayMaxConns int
	// ExecKeepalive is how often an exec's client is pinged; one that leaves three pings in a
	// row unanswered has its command killed (--exec-keepalive). 0: DefaultExecKeepalive.
	ExecKeepalive time.Duration
	// Spares is how many sandboxes are kept started ahead of need for creates to take
	// (--spares; sandbox.Manager.SetSpares); 0: none.
	Spares int
	// EventLimits bound each session's and each sandbox's event log (--session-log-events,
	// --session-log-mib, --sandbox-log-events, --sandbox-log-mib); 0 fields are no limit.
	EventLimits eventlog.Limits
	// Agent makes the daemon a node agent of a Kubernetes cluster (--kubeconfig); nil: it is
	// not one.
	Agent *AgentConfig
	// Front makes the daemon a cluster's front (--cluster, RunFront); nil: it is not one.
	Front *FrontConfig
	// Version is the daemon's build version.
	Version string
	Log     *slog.Logger
}

// Daemon is a running sandboxd.
type Daemon struct {
	cfg       Config
	log       *slog.Logger
	store     *store.Store
	volumes   volume.Driver
	layers    *volume.Layers // nil where sandboxes' writable roots cannot be bounded
	images    *images.Store
	sandboxes *sandbox.Manager
	exposures *exposer
	events    *eventlog.Log
	sessions  *session.Service
	gateway   *gateway.Gateway
	egressLog *egresslog.Log
	secrets   *secrets.Store
	logins    *logins.Store
	usage     *usage.Store
	routeCfg  *modelroute.Config
	// trustedCAs is what every sandbox trusts besides its image's bundle: the gateway's CA,
	// then Config.SandboxCAs.
	trustedCAs []byte
	// liveSessions is sessions once made: the model route asks it from the gateway's
	// goroutines, which serve sandboxes before the session service exists.
	liveSessions atomic.Pointer[session.Service]
	audit        *auditlog.Log
	users        userStore
	auth         *authenticator
	sshKeys      *sshKeys
	ssh          *sshd.Server // nil while the endpoint is off
	sshEndpoint  string       // where remote clients reach the SSH endpoint, HOST:PORT (sshEndpoint)
	tlsEndpoint  string       // where remote clients reach the TLS listener, HOST:PORT (listenAPI)
	host         hostLimits   // the host's kernel limits: raised at start, sandboxes admitted against them
	// tls is the daemon's CA, which signs users' client certificates, and the TLS listener's
	// certificate and fingerprint.
	tls daemonTLS
	// front is the cluster a front serves (--cluster); nil on a host.
	front *front.Front
}

// New opens the data dir and reconciles the store with what runs on the host.
func New(ctx context.Context, cfg Config) (*Daemon, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if err := checkDataDir(cfg.DataDir, cfg.Log); err != nil {
		return nil, err
	}
	if cfg.ImagesDir == "" {
		cfg.ImagesDir = filepath.Join(cfg.DataDir, "images")
	}
	for _, dir := range []string{cfg.ImagesDir, filepath.Join(cfg.DataDir, "sandboxes"), filepath.Join(cfg.DataDir, "run")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	// Sandboxes' roots pass through it to their own directories (see checkDataDir).
	if err := os.Chmod(filepath.Join(cfg.DataDir, "sandboxes"), dataDirMode); err != nil {
		return nil, err
	}
	if err := runtime.CheckSearchable(filepath.Join(cfg.DataDir, "sandboxes")); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if _, err := os.Stat(cfg.InitPath); err != nil {
		return nil, fmt.Errorf("sandbox init binary: %w (build it with `make build` or pass --init-path)", err)
	}
	// Before the store opens it: an older daemon kept the event log in the store's file.
	dbPath := filepath.Join(cfg.DataDir, store.FileState)
	if moved, err := eventlog.Migrate(dbPath, filepath.Join(cfg.DataDir, store.FileEvents)); err != nil {
		return nil, err
	} else if moved {
		cfg.Log.Info("moved the session event logs out of sandboxd.db into their own file, and compacted sandboxd.db", "file", store.FileEvents)
	}
	st, err := store.Open(dbPath)
	if err != nil {
		return nil, err
	}
	// The secrets first: a missing or wrong master key stops the daemon before it touches
	// anything else.
	keyFile := cfg.MasterKeyFile
	if keyFile == "" {
		keyFile = filepath.Join(cfg.DataDir, "master.key")
	}
	sec, err := secrets.Open(st.Owned("internal/secrets"), keyFile)
	if err != nil {
		st.Close()
		return nil, err
	}
	d := &Daemon{cfg: cfg, log: cfg.Log, store: st, secrets: sec, images: &images.Store{Dir: cfg.ImagesDir}}
	if d.audit, err = auditlog.Open(st.Owned("internal/auditlog")); err != nil {
		st.Close()
		return nil, err
	}
	if d.users, err = users.Open(st.Owned("internal/users")); err != nil {
		st.Close()
		return nil, err
	}
	d.auth = newAuthenticator(d.users, d.log)
	if d.logins, err = logins.Open(st.Owned("internal/logins"), sec); err != nil {
		st.Close()
		return nil, err
	}
	d.logins.Audit = d.auditAdd
	d.logins.Refresh = &logins.Refresher{Client: d.upstreamClient()}
	if u := cfg.ProviderURLs["chatgpt-token"]; u != nil {
		d.logins.Refresh.TokenURL = u.String()
	}
	if err := d.open(ctx); err != nil {
		st.Close()
		return nil, err
	}
	return d, nil
}

// checkDataDir makes sure no host user but root can list or read the data dir: the images,
// every sandbox's root filesystem and the workspaces sit under it, with whatever setuid files
// and device nodes sandboxes wrote. Its mode is 0711, not 0700: a sandbox's root is an
// unprivileged host id (its user namespace's) that must pass through it, and through
// sandboxes/, to reach its own root filesystem; each sandbox's directory below is open to that
// sandbox alone, and everything else in the data dir is root's alone. Any other mode is fixed,
// and a mode that was open to others is said so; a directory owned by another user is refused,
// as its owner could loosen it again.
func checkDataDir(dir string, log *slog.Logger) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("data dir %s is owned by uid %d, not by sandboxd's uid %d: its owner could reach every sandbox's files; chown it to root or choose another --data-dir", dir, st.Uid, os.Geteuid())
	}
	if perm := fi.Mode().Perm(); perm != dataDirMode {
		if err := os.Chmod(dir, dataDirMode); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		if log != nil && perm&^dataDirMode != 0 {
			log.Warn("data dir was open to other users; set its mode to 0711", "dir", dir, "mode", fmt.Sprintf("%04o", perm))
		}
	}
	return nil
}

// dataDirMode is the mode of the data dir and of its sandboxes/ (see checkDataDir).
const dataDirMode = 0o711

func (d *Daemon) open(ctx context.Context) error {
	// First: a CA or a certificate that cannot be loaded stops the start before anything is
	// mounted.
	ca, err := gateway.LoadOrCreateCA(d.cfg.DataDir)
	if err != nil {
		return err
	}
	if d.tls, err = loadTLS(d.cfg, d.log); err != nil {
		return err
	}
	d.auth.fronts = d.tls.Fronts
	// The runtime before the volumes: a binary that cannot run sandboxes (built without
	// seccomp) stops here, before the volume pool is mounted.
	tools := map[string]string{}
	var provided []string // harnesses every sandbox gets from sandboxd, whatever its image
	if d.cfg.FakeAgentPath != "" {
		tools["hiloop-fake-agent"] = d.cfg.FakeAgentPath
		provided = append(provided, fake.Name)
	}
	rt, err := runtime.New(runtime.Config{
		StateDir: filepath.Join(d.cfg.DataDir, "runtime"),
		RunDir:   filepath.Join(d.cfg.DataDir, "run"),
		InitPath: d.cfg.InitPath,
		Tools:    tools,
	})
	if err != nil {
		return err
	}
	volDir := filepath.Join(d.cfg.DataDir, "volumes")
	switch d.cfg.VolumeDriver {
	case "xfs", "":
		d.volumes, err = volume.NewXFS(volDir)
	case "dir":
		d.volumes, err = volume.NewDir(volDir)
	default:
		return fmt.Errorf("unknown volume driver %q: use xfs or dir", d.cfg.VolumeDriver)
	}
	if err != nil {
		return err
	}
	d.sandboxes = sandbox.NewManager(d.store, rt, d.volumes, d.images, filepath.Join(d.cfg.DataDir, "sandboxes"), d.log)
	d.host = hostLimits{log: d.log}
	d.host.raise()
	d.host.logRoom()
	if err := runtime.SocketAccounting(); err != nil {
		d.log.Warn("sandboxes' TCP buffers are not charged to them: one sandbox can take the host's TCP memory", "err", err)
	}
	d.sandboxes.SetHostBudget(d.host)
	if err := d.openLayers(); err != nil {
		return err
	}
	d.setStorageBudget()
	if d.egressLog, err = egresslog.Open(d.store.Owned("internal/egresslog"), egresslog.Config{Logger: d.log.With("component", "egress-log")}); err != nil {
		return err
	}
	nofile := fileLimit()
	maxConns, err := gatewayMaxConns(d.cfg.GatewayMaxConns, nofile)
	if err != nil {
		return err
	}
	d.log.Info("egress gateway budget", "max_conns", maxConns, "nofile", nofile)
	if err := d.openModelRoute(); err != nil {
		return err
	}
	d.gateway, err = gateway.New(gateway.Config{
		Routes:      d.cfg.GatewayRoutes,
		Policy:      &gateway.AddrPolicy{Allow: d.cfg.EgressAllowCIDRs},
		Audit:       egressAudit(d.egressLog, d.log, d.buildEgressAudit),
		Log:         d.log,
		CA:          ca,
		UpstreamCAs: d.cfg.GatewayUpstreamCAs,
		MaxConns:    maxConns,
		ModelRoute:  d.modelRoute,
	})
	if err != nil {
		return err
	}
	d.trustedCAs = append(ca.CertPEM(), d.cfg.SandboxCAs...)
	d.sandboxes.SetEgress(egress{gw: d.gateway, rt: rt, secrets: d.secrets, cas: d.trustedCAs, log: d.log})
	if img, err := d.images.Get(api.DefaultImage); err == nil {
		// Beside the reconcile, not before it: reading the host's trust store (a few hundred
		// certificates) is no reason to serve later.
		go func() {
			if w := d.hostCAWarning(img); w != "" {
				d.log.Warn(w)
			}
		}()
	}
	if err := d.sandboxes.Reconcile(ctx); err != nil {
		return err
	}
	// A spare has the limits a create gets by default on this host.
	spareLimits := api.SandboxesPost{CPUs: api.DefaultCPUs, MemoryMB: api.DefaultMemoryMB}
	var unfit api.Problems
	d.host.fitHost(&spareLimits, true, true, &unfit)
	if err := unfit.Err(); err != nil {
		return fmt.Errorf("spare sandboxes: %w", err)
	}
	d.sandboxes.SetSpares(d.cfg.Spares, spareLimits.CPUs, spareLimits.MemoryMB)
	d.sandboxes.OnDelete(d.egressLogDeleted)
	d.sandboxes.OnDelete(d.secretsDeleted)
	if err := d.pruneEgressLog(); err != nil {
		return fmt.Errorf("prune the egress log: %w", err)
	}
	d.events, err = eventlog.Open(filepath.Join(d.cfg.DataDir, store.FileEvents), eventlog.Config{
		Limits:    d.cfg.EventLimits,
		SandboxOf: d.sessionSandboxID,
		Logger:    d.log.With("component", "events"),
	})
	if err != nil {
		return err
	}
	d.sessions = session.New(session.Config{
		Store:       d.store,
		Log:         d.events,
		Sandboxes:   d.sandboxes,
		Images:      d.images,
		Provided:    provided,
		Gateway:     harness.Env{GatewayURL: gateway.ProxyURL},
		Credentials: d.harnessKeys,
		LogDir:      filepath.Join(d.cfg.DataDir, "harness"),
		Version:     d.cfg.Version,
		Logger:      d.log.With("component", "sessions"),
	})
	d.liveSessions.Store(d.sessions)
	d.sandboxes.OnStop(d.sessions.SandboxStopped)
	d.sandboxes.OnDelete(d.sessions.SandboxDeleted)
	d.sandboxes.OnDelete(d.usageDeleted)
	if err := d.sessions.Recover(ctx); err != nil {
		return fmt.Errorf("recover sessions: %w", err)
	}
	if err := d.pruneUsage(); err != nil {
		return fmt.Errorf("prune the model usage: %w", err)
	}
	if d.sshKeys, err = newSSHKeys(d.store); err != nil {
		return err
	}
	d.sshKeys.admin = d.isAdmin
	d.users.OnRevoke(d.userRemoved)
	if d.cfg.SSHListen != "" {
		d.ssh, err = sshd.New(sshd.Config{
			Listen:      d.cfg.SSHListen,
			HostKeyPath: filepath.Join(d.cfg.DataDir, "ssh_host_ed25519_key"),
			Sandboxes:   d.sandboxes,
			Keys:        d.sshKeys,
			Log:         d.log.With("component", "sshd"),
		})
		if err != nil {
			return fmt.Errorf("ssh endpoint: %w", err)
		}
		d.sandboxes.OnStop(d.ssh.CloseSandbox)
		d.sshEndpoint = sshEndpoint(d.cfg.SSHAdvertise, d.cfg.SSHListen, d.ssh.Addr().(*net.TCPAddr), hostName())
	}
	if d.exposures, err = newExposer(d.store, d.sandboxes, d.log.With("component", "expose")); err != nil {
		return err
	}
	d.sandboxes.OnDelete(d.exposures.sandboxDeleted)
	return nil
}

// openLayers gives sandboxes bounded writable roots in <data>/layers; a host without loop
// devices or mkfs.ext4 runs them unbounded, and says so.
func (d *Daemon) openLayers() error {
	l, err := volume.NewLayers(filepath.Join(d.cfg.DataDir, "layers"))
	if errors.Is(err, volume.ErrUnsupported) {
		d.log.Warn("sandboxes' root filesystems are not size-limited: they write into the data dir's filesystem", "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	d.layers = l
	d.sandboxes.SetLayers(l)
	return nil
}

// setStorageBudget budgets the capacity the sandboxes are promised against the volume pool and the
// root layers' pool, where the volume driver can say what it holds (not the dir driver).
func (d *Daemon) setStorageBudget() {
	vols, ok := d.volumes.(sandbox.Storage)
	if !ok {
		return
	}
	pools := []sandbox.Storage{vols}
	if d.layers != nil {
		pools = append(pools, d.layers)
	}
	d.sandboxes.SetBudget(cmp.Or(d.cfg.Overcommit, 1), pools...)
}

// sessionSandboxID is the id of the sandbox a session runs in, "" for a session that is gone: the
// event log's limits per sandbox.
func (d *Daemon) sessionSandboxID(session string) string {
	rec, err := d.store.GetSession(session)
	if err != nil {
		return ""
	}
	return rec.SandboxID
}

// Close stops the harnesses and releases the store. Sandboxes keep running; the next daemon
// picks them up.
func (d *Daemon) Close() error {
	if d.sandboxes != nil {
		// Spares are no sandboxes: the next daemon makes its own.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		d.sandboxes.CloseSpares(ctx)
		cancel()
	}
	if d.exposures != nil {
		d.exposures.close() // the records stay: the next daemon listens again
	}
	if d.sessions != nil {
		d.sessions.Close()
	}
	if d.events != nil {
		d.events.Close()
	}
	if d.gateway != nil {
		// Sandboxes run on without egress until the next daemon serves them again.
		d.gateway.Close()
	}
	if d.egressLog != nil {
		d.egressLog.Close() // after the gateway: its last records are stored
	}
	if d.usage != nil {
		d.usage.Close() // after the gateway: the route's last records are stored
	}
	d.trimAll(context.Background())
	// With no workspace mounted the volume driver can let go of its own mount point too.
	if c, ok := d.volumes.(interface{ Close() error }); ok {
		if err := c.Close(); err != nil && !errors.Is(err, volume.ErrBusy) {
			d.log.Warn("release volume mounts", "err", err)
		}
	}
	if d.layers != nil { // likewise with no sandbox running
		if err := d.layers.Close(); err != nil && !errors.Is(err, volume.ErrBusy) {
			d.log.Warn("release root filesystem mounts", "err", err)
		}
	}
	return d.store.Close()
}

func (d *Daemon) capabilities() []string {
	caps := []string{"exec", "image_build", "sessions"}
	if d.ssh != nil {
		caps = append(caps, "ssh")
	}
	if d.volumes.Resizable() {
		caps = append(caps, "workspace_size", "workspace_grow")
	}
	if _, ok := d.volumes.(volume.Snapshotter); ok {
		caps = append(caps, "snapshots")
	}
	return caps
}

// Serve serves the API until ctx is cancelled, then drains in-flight requests.
func (d *Daemon) Serve(ctx context.Context) error {
	handler := withVersion(d.cfg.Version, newMux(d.routes(), newIdempotency(d.store, d.log), d.log, d.auditAdd))
	apis, err := d.listenAPI(handler)
	if err != nil {
		return err
	}
	errc := make(chan error, len(apis)+1)
	go d.logins.Run(ctx, d.log.Warn)
	go d.trimWorkspaces(ctx)
	if d.ssh != nil {
		d.log.Info("serving SSH", "addr", d.ssh.Addr().String(), "advertised", d.sshEndpoint)
		go func() { errc <- d.ssh.Serve(ctx) }()
	}
	for _, a := range apis {
		a.logServing(d.log)
		go func() { errc <- a.srv.Serve(a.ln) }()
	}
	if d.cfg.Agent != nil {
		// Once the TLS listener is up: its endpoint and fingerprint go on the Node.
		if err := d.startAgent(ctx, errc); err != nil {
			for _, a := range apis {
				_ = a.srv.Close()
			}
			return err
		}
	}
	select {
	case <-ctx.Done():
		d.log.Info("stopping on a signal: finishing the requests in flight")
	case err := <-errc:
		d.log.Error("serve", "err", err)
	}
	defer d.logLeftRunning()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, a := range apis {
		_ = a.srv.Shutdown(shutdownCtx)
	}
	os.Remove(d.cfg.Socket)
	return nil
}

// apiServer is one of the API's listeners and the HTTP server on it.
type apiServer struct {
	srv  *http.Server
	ln   net.Listener
	kind apiListenerKind
	tls  *daemonTLS // the TLS listener's
}

type apiListenerKind int

const (
	apiUnix apiListenerKind = iota
	apiTLS
	apiInsecure
)

// logServing says where the API is served: with the fingerprint clients pin on the TLS
// listener, and with a warning at every start on plain HTTP.
func (a apiServer) logServing(log *slog.Logger) {
	addr := a.ln.Addr().String()
	switch a.kind {
	case apiUnix:
		log.Info("serving API", "addr", addr)
	case apiTLS:
		log.Info("serving API over TLS", "addr", addr, "fingerprint", a.tls.Fingerprint)
	case apiInsecure:
		log.Warn("serving API over plain HTTP (--insecure-listen): anyone on the path reads every credential and every byte of every exec; use --listen, which serves TLS", "addr", addr)
	}
}

// listenAPI listens on the unix socket and on the TCP addresses the config names, each with
// its HTTP server.
func (d *Daemon) listenAPI(handler http.Handler) ([]apiServer, error) {
	unixLn, err := listenUnix(d.cfg.Socket)
	if err != nil {
		return nil, err
	}
	unixMax, tcpMax := apiConnLimits()
	// A local client may hand its stdio to an exec along with the request (internal/handoff).
	// Whoever opens the socket is root or in its group: the local admin.
	apis := []apiServer{d.newAPIServer(apiUnix, asLocalAdmin(handler, d.log), newConnLimiter(handoff.Listen(unixLn), unixMax))}
	apis[0].srv.ConnContext = withConn
	for _, l := range []struct {
		kind apiListenerKind
		addr string
	}{{apiTLS, d.cfg.Listen}, {apiInsecure, d.cfg.InsecureListen}} {
		if l.addr == "" {
			continue
		}
		tcpLn, err := net.Listen("tcp", l.addr)
		if err != nil {
			for _, a := range apis {
				a.ln.Close()
			}
			return nil, err
		}
		if l.kind == apiTLS {
			d.tlsEndpoint = sshEndpoint("", l.addr, tcpLn.Addr().(*net.TCPAddr), hostName())
		}
		// A request on TCP acts as the user of its client certificate or API token; the
		// authenticator tracks each connection by its credential, to close it on revocation.
		a := d.newAPIServer(l.kind, handler, newConnLimiter(tcpLn, tcpMax))
		d.auth.guard(a.srv)
		apis = append(apis, a)
	}
	return apis, nil
}

// newAPIServer is the HTTP server of one of the API's listeners, with the timeouts they share.
// The TLS listener's connections are TLS over the limiter's, which tracks them by its own.
func (d *Daemon) newAPIServer(kind apiListenerKind, handler http.Handler, limiter *connLimiter) apiServer {
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: apiHeaderTimeout,
		IdleTimeout:       apiIdleTimeout,
		ConnState:         limiter.connState,
		// Also a line for each failed TLS handshake, such as plain HTTP sent to the TLS port
		// (which Go's server answers with a 400 of its own).
		ErrorLog: slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
	}
	a := apiServer{srv: srv, ln: limiter, kind: kind}
	if kind == apiTLS {
		a.tls = &d.tls
		// A stream's TLS records are read many a syscall (netcopy.ReadBuffered).
		a.ln = tls.NewListener(netcopy.ReadBufferedListener(limiter), d.tls.serverConfig())
		srv.TLSNextProto = noHTTP2
		srv.ConnState = func(c net.Conn, s http.ConnState) {
			if tc, ok := c.(*tls.Conn); ok {
				c = netcopy.Unbuffered(tc.NetConn())
			}
			limiter.connState(c, s)
		}
	}
	return a
}

// trimInterval is how often the mounted workspaces' deleted data is given back to the host.
const trimInterval = 10 * time.Minute

// trimWorkspaces trims every mounted workspace each trimInterval until ctx ends (Close trims
// once more): what sandboxes deleted stops taking the host's room. Volumes are not mounted
// with discard, which costs every write that follows a delete.
func (d *Daemon) trimWorkspaces(ctx context.Context) {
	tick := time.NewTicker(trimInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			d.trimAll(ctx)
		case <-ctx.Done():
			return
		}
	}
}

// trimAll trims the mounted workspaces, where the volume driver can.
func (d *Daemon) trimAll(ctx context.Context) {
	if t, ok := d.volumes.(interface{ TrimAll(context.Context) error }); ok {
		if err := t.TrimAll(ctx); err != nil {
			d.log.Warn("trim workspaces", "err", err)
		}
	}
}

// logLeftRunning says, as the daemon stops, which sandboxes it leaves running: they go on
// without it, and the next start adopts them.
func (d *Daemon) logLeftRunning() {
	list, err := d.sandboxes.List(context.Background())
	if err != nil {
		d.log.Warn("stopped; cannot list the sandboxes left running", "err", err)
		return
	}
	var running []string
	for _, sb := range list {
		if sb.State == api.StateRunning {
			running = append(running, sb.Name)
		}
	}
	d.log.Info("stopped; running sandboxes go on and are adopted at the next start", "running", len(running), "sandboxes", strings.Join(running, ","))
}

// listenUnix listens on path (mode 0660), replacing a stale socket but never a live one.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("another sandboxd is serving %s", path)
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
