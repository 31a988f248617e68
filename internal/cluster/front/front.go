// Package front is the Kubernetes side of a cluster's front (sandboxd --cluster): it runs the
// controller-runtime manager whose cache every read is served from (Sandboxes, Users, agent
// Nodes) and in which the controller runs, leader-elected; it writes Sandbox specs (create,
// spec.stopped, delete) and the first placement Pod; it finds the node agent holding a sandbox
// and reaches it over mutual TLS with the front's client certificate; and it keeps the front's
// TLS identity in a Secret shared by every replica.
//
// It owns no state of its own: whatever a replica knows is in the API server. It never writes a
// Sandbox's status (the controller's), a Node (its agent's), or a User (internal/cluster/users).
// The HTTP edge (routes, authentication, errors) is internal/daemon's.
package front

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/hiloop/hiloop/internal/cluster/controller"
	"github.com/hiloop/hiloop/internal/cluster/users"
	hv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// Options is how a front replica runs.
type Options struct {
	// Namespace is the front's own namespace: its TLS identity's Secret and ConfigMap and the
	// controller's Lease live there.
	Namespace string
	// DefaultUserNamespace is the Kubernetes namespace of the Sandboxes of a user whose User
	// names none (the built-in admin's, before it has a User).
	DefaultUserNamespace string
	// TLSSANs are the host names and addresses clients reach the front at, besides its
	// Service's names: the serving certificate made by the first replica names them.
	TLSSANs []string
	// Log is where the front says what happens off the request path.
	Log *slog.Logger
}

// Front is one front replica's view of the cluster.
type Front struct {
	opt   Options
	mgr   manager.Manager
	c     client.Client // writes; reads from the manager's cache
	live  client.Reader // the API server itself
	Users *users.Store
	// Identity is the front's TLS identity (LoadIdentity).
	Identity Identity

	// changed is closed and replaced whenever a Sandbox in the cache changes: waiters look
	// again (waitFor).
	mu      sync.Mutex
	changed chan struct{}

	agents agentTransports
}

// Open connects to the cluster with cfg, loads or makes the front's TLS identity, and prepares
// the manager (the controller, the users store, the caches). Start runs it.
func Open(ctx context.Context, cfg *rest.Config, o Options) (*Front, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	mopts, err := controller.ManagerOptions(o.Namespace)
	if err != nil {
		return nil, err
	}
	mgr, err := manager.New(cfg, mopts)
	if err != nil {
		return nil, fmt.Errorf("the front's manager: %w", err)
	}
	if err := controller.Add(mgr, controller.Options{}); err != nil {
		return nil, err
	}
	f := &Front{opt: o, mgr: mgr, c: mgr.GetClient(), live: mgr.GetAPIReader(), changed: make(chan struct{})}
	f.agents.front = f
	if f.Users, err = users.New(ctx, mgr.GetClient(), mgr.GetCache(), users.Options{DefaultNamespace: o.DefaultUserNamespace, Log: o.Log.With("component", "users")}); err != nil {
		return nil, err
	}
	inf, err := mgr.GetCache().GetInformer(ctx, &hv1.Sandbox{})
	if err != nil {
		return nil, fmt.Errorf("the front's cache of sandboxes: %w", err)
	}
	notify := func(any) { f.notify() }
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, n any) { f.notify() },
		DeleteFunc: notify,
	}); err != nil {
		return nil, err
	}
	if _, err := mgr.GetCache().GetInformer(ctx, &corev1.Node{}); err != nil {
		return nil, fmt.Errorf("the front's cache of nodes: %w", err)
	}
	// The identity is read before anything is served, straight from the API server: the
	// manager's cache does not hold Secrets.
	direct, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return nil, err
	}
	if f.Identity, err = LoadIdentity(ctx, direct, o.Namespace, o.TLSSANs, o.Log); err != nil {
		return nil, err
	}
	return f, nil
}

// Start runs the manager (the caches, and the controller while this replica leads) until ctx
// ends, and returns once the caches have synced; errc gets the manager's end.
func (f *Front) Start(ctx context.Context, errc chan<- error) error {
	go func() { errc <- f.mgr.Start(ctx) }()
	if !f.mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("the front's caches did not sync: %w", context.Cause(ctx))
	}
	return nil
}

// notify wakes every waiter.
func (f *Front) notify() {
	f.mu.Lock()
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

// changes is the channel closed at the next change of a Sandbox.
func (f *Front) changes() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}
