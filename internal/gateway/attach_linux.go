package gateway

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
)

// Config is what a daemon's gateway serves every sandbox with.
type Config struct {
	// Routes are sandboxd's --gateway-resolve mappings.
	Routes []Route
	// Policy checks every address dialled except a route's; nil: the default AddrPolicy.
	Policy *AddrPolicy
	// Lookup resolves names on the host for the sandboxes' resolvers and the proxy; nil: the
	// host's resolver.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Audit receives every decision; it must not block for long. nil: none.
	Audit func(Record)
	Log   *slog.Logger
	// CA mints the leaf certificates with which the gateway terminates TLS to hosts that have
	// a secret bound to them (SetSecrets). nil: nothing is terminated, every host is tunnelled.
	CA *CA
	// UpstreamCAs verify the real hosts of terminated connections (the host's system roots
	// and sandboxd --gateway-upstream-ca). nil: the host's trust store alone.
	UpstreamCAs *x509.CertPool
	// MaxConns bounds the connections of all sandboxes together (sandboxd
	// --gateway-max-conns; see Budget); 0: each sandbox's own DefaultMaxConns alone.
	MaxConns int
	// ModelRoute makes the model route of the sandbox id: the handler the proxy serves
	// origin-form requests with whose path it handles (see Proxy.ModelRoute). nil: none.
	ModelRoute func(sandboxID string) (ModelRoute, error)
}

// Gateway serves the egress of every attached sandbox: in each sandbox's own network
// namespace, the capture rules, the proxy's listeners on ProxyPort and the resolver's on
// DNSPort. Its goroutines run in the daemon's namespace, so upstream dials and lookups leave
// from the host.
type Gateway struct {
	cfg    Config
	names  *Names
	budget *Budget // shared by every sandbox's proxy

	mu       sync.Mutex
	boxes    map[string]*attachment // sandbox id → what serves it
	prepared map[string]*sockets    // sandbox id → its capture, made by Prepare, until Attach
}

// attachment is one sandbox's share of the gateway.
type attachment struct {
	proxy   *Proxy
	secrets atomic.Pointer[func(host string) []Binding] // SetSecrets; nil: none
	closers []io.Closer                                 // the resolver's sockets
	wg      sync.WaitGroup
}

// New returns a gateway for cfg.
func New(cfg Config) (*Gateway, error) {
	if len(cfg.Routes) > MaxNames {
		return nil, fmt.Errorf("gateway: %d routed hosts, at most %d", len(cfg.Routes), MaxNames)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	lookup := cfg.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) { return hostLookup(ctx, host) }
	}
	cfg.Lookup = boundLookups(lookup, MaxLookups)
	return &Gateway{cfg: cfg, names: NewNames(cfg.Routes), budget: &Budget{Max: cfg.MaxConns},
		boxes: map[string]*attachment{}, prepared: map[string]*sockets{}}, nil
}

// MaxLookups bounds the host lookups of all sandboxes together, their resolvers' and their
// proxies': each sandbox's resolver has 64 in flight at most, and this keeps many sandboxes from
// piling thousands onto the host's resolver and the daemon.
const MaxLookups = 256

// errLookupsBusy is a lookup refused because MaxLookups are in flight: the resolver answers
// SERVFAIL, the proxy a 502, and the client may try again.
var errLookupsBusy = &net.DNSError{Err: "the host's lookups are all busy (sandboxd's bound across sandboxes)", IsTemporary: true}

// boundLookups lets at most n calls of lookup run at once; one more fails at once.
func boundLookups(lookup func(context.Context, string) ([]netip.Addr, error), n int) func(context.Context, string) ([]netip.Addr, error) {
	slots := make(chan struct{}, n)
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			return lookup(ctx, host)
		default:
			return nil, errLookupsBusy
		}
	}
}

// listenAddrs are the gateway's sockets inside every sandbox.
var (
	proxyAddrs = []string{"127.0.0.1:" + strconv.Itoa(ProxyPort), "[::1]:" + strconv.Itoa(ProxyPort)}
	dnsAddrs   = []string{"127.0.0.1:" + strconv.Itoa(DNSPort), "[::1]:" + strconv.Itoa(DNSPort)}
)

// Attach captures the egress of the sandbox whose network namespace is ns (id is the daemon's
// id for it, name its name for the audit) and serves it under the egress policy hp (nil: open)
// until Detach. Attaching a sandbox that is attached already, or that a previous daemon served,
// starts afresh.
func (g *Gateway) Attach(id, name string, ns *os.File, hp *HostPolicy) (retErr error) {
	g.mu.Lock()
	socks := g.prepared[id]
	delete(g.prepared, id)
	g.mu.Unlock()
	g.Detach(id)
	if socks != nil && (socks.netns == 0 || socks.netns != namespaceOf(ns)) {
		// Prepared in a namespace that is gone (the sandbox was started again since): of no use.
		socks.close()
		socks = nil
	}
	if socks == nil {
		var err error
		if socks, err = setupAndListen(ns); err != nil {
			return fmt.Errorf("gateway: capture the egress of %s: %w", name, err)
		}
	}
	audit := g.cfg.Audit
	if audit != nil {
		// The audit log keeps records by id, so a sandbox made later under the same name starts afresh.
		audit = func(r Record) { r.SandboxID = id; g.cfg.Audit(r) }
	}
	a := &attachment{}
	// The names this sandbox's policy refuses, by the address its resolver answers each with;
	// its proxy reads them back. One per attachment: what a sandbox is refused is its own.
	refused := &RefusedNames{}
	a.proxy = &Proxy{
		Sandbox:       name,
		Routes:        g.cfg.Routes,
		SyntheticHost: g.names.Host,
		Refused:       refused,
		OriginalDst:   OriginalDst,
		Policy:        g.cfg.Policy,
		Lookup:        g.cfg.Lookup,
		Audit:         audit,
		Log:           g.cfg.Log.With("sandbox", name),
		// The Proxy's fields are fixed once it serves; the bindings behind this one are not,
		// so SetSecrets applies to the next connection and the next request at once.
		Secrets:     a.secretsFor,
		CA:          g.cfg.CA,
		UpstreamCAs: g.cfg.UpstreamCAs,
		Budget:      g.budget,
	}
	a.closers = socks.closers // Proxy.Close closes the proxy's too; a second close is harmless
	defer func() {
		if retErr != nil {
			a.close()
		}
	}()
	if g.cfg.ModelRoute != nil {
		route, err := g.cfg.ModelRoute(id)
		if err != nil {
			return fmt.Errorf("gateway: the model route of %s: %w", name, err)
		}
		a.proxy.ModelRoute = route
	}
	// Before the first server: no connection is decided without the policy (until then they
	// wait in the listeners' backlogs).
	a.proxy.SetHostPolicy(hp)
	res := &Resolver{Names: g.names, Lookup: g.cfg.Lookup, Addrs: g.cfg.Policy, Audit: audit, Sandbox: name, Policy: a.proxy.HostPolicy, Refused: refused}
	for _, ln := range socks.proxy {
		a.serve(func() error { return a.proxy.Serve(ln) })
	}
	for _, pc := range socks.dnsUDP {
		a.serve(func() error { return res.ServeUDP(pc) })
	}
	for _, ln := range socks.dnsTCP {
		a.serve(func() error { return res.ServeTCP(ln) })
	}
	g.mu.Lock()
	g.boxes[id] = a
	g.mu.Unlock()
	g.cfg.Log.Debug("gateway attached", "sandbox", name)
	return nil
}

// serve runs one server of the attachment until its socket closes.
func (a *attachment) serve(fn func() error) {
	a.wg.Go(func() {
		if err := fn(); err != nil && !errors.Is(err, ErrProxyClosed) && !errors.Is(err, net.ErrClosed) {
			a.proxy.Log.Error("gateway server ended", "err", err)
		}
	})
}

// close ends every connection and listener of the attachment and waits for its servers.
func (a *attachment) close() {
	a.proxy.Close()
	for _, c := range a.closers {
		c.Close()
	}
	a.wg.Wait()
}

// SetPolicy makes hp the egress policy of the attached sandbox id at once: connections and DNS
// questions from then on follow it, connections already carried go on. A sandbox that is not
// attached is left alone (the policy is handed over again at its next Attach).
func (g *Gateway) SetPolicy(id string, hp *HostPolicy) {
	g.mu.Lock()
	a := g.boxes[id]
	g.mu.Unlock()
	if a != nil {
		a.proxy.SetHostPolicy(hp)
	}
}

// secretsFor is the attachment's Proxy.Secrets: what SetSecrets last gave it.
func (a *attachment) secretsFor(host string) []Binding {
	if fn := a.secrets.Load(); fn != nil {
		return (*fn)(host)
	}
	return nil
}

// SetSecrets makes fn the lookup of the secrets bound to the attached sandbox id (see
// Proxy.Secrets) at once: connections that arrive and requests carried from then on follow it,
// so an attach, detach or rotation needs no reconnect. nil: the sandbox has none. A sandbox
// that is not attached is left alone (hand its secrets over again after its next Attach).
func (g *Gateway) SetSecrets(id string, fn func(host string) []Binding) {
	g.mu.Lock()
	a := g.boxes[id]
	g.mu.Unlock()
	if a == nil {
		return
	}
	if fn == nil {
		a.secrets.Store(nil)
		return
	}
	a.secrets.Store(&fn)
}

// Detach stops serving the sandbox id and ends its connections, also those mid-transfer. The
// capture rules stay in its namespace (they go with it), so it has no way out until the next
// Attach. A sandbox that is not attached is left alone.
func (g *Gateway) Detach(id string) {
	g.mu.Lock()
	a := g.boxes[id]
	delete(g.boxes, id)
	socks := g.prepared[id]
	delete(g.prepared, id)
	g.mu.Unlock()
	if a != nil {
		a.close()
	}
	if socks != nil {
		socks.close()
	}
}

// Prepare makes the capture of the sandbox whose network namespace is ns ahead of its Attach
// (a spare sandbox's, before a create gives it a name and a policy): the capture rules and the
// listeners, which Attach then serves instead of making its own. Until then connections wait in
// the listeners' backlogs, decided by nobody; nothing runs in a spare to make any. Detach drops
// a capture never attached.
func (g *Gateway) Prepare(id string, ns *os.File) error {
	socks, err := setupAndListen(ns)
	if err != nil {
		return fmt.Errorf("gateway: capture the egress of %s: %w", id, err)
	}
	socks.netns = namespaceOf(ns)
	g.mu.Lock()
	old := g.prepared[id]
	g.prepared[id] = socks
	g.mu.Unlock()
	if old != nil {
		old.close()
	}
	return nil
}

// namespaceOf identifies the namespace ns names (its inode on nsfs); zero if it cannot be read.
func namespaceOf(ns *os.File) uint64 {
	st, err := ns.Stat()
	if err != nil {
		return 0
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Ino
	}
	return 0
}

// Close detaches every sandbox, and drops every capture never attached.
func (g *Gateway) Close() {
	g.mu.Lock()
	ids := make([]string, 0, len(g.boxes)+len(g.prepared))
	for id := range g.boxes {
		ids = append(ids, id)
	}
	for id := range g.prepared {
		ids = append(ids, id)
	}
	g.mu.Unlock()
	for _, id := range ids {
		g.Detach(id)
	}
}
