package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/hiloop/hiloop/internal/cluster/agent"
	"github.com/hiloop/hiloop/internal/cluster/front"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/pkg/api"
)

// FrontConfig makes sandboxd a cluster's front (sandboxd --cluster): it serves the hiloop API
// over the cluster's Sandbox resources and routes everything else to the node agent holding
// the sandbox. It runs no sandbox, needs no root and keeps nothing on disk.
type FrontConfig struct {
	// Kubeconfig is the front's kubeconfig file, or agent.InCluster (the default in a Pod).
	Kubeconfig string
	// Namespace is the front's own namespace (--cluster-namespace): its TLS identity and the
	// controller's Lease live there.
	Namespace string
	// DefaultUserNamespace is the Kubernetes namespace of the Sandboxes of a user whose User
	// names none (--default-user-namespace).
	DefaultUserNamespace string
}

// Defaults of the front's flags.
const (
	DefaultClusterNamespace     = "hiloop-system"
	DefaultDefaultUserNamespace = "hiloop"
)

// checkFrontFlags validates the front's flags before anything starts.
func checkFrontFlags(cfg Config) error {
	fc := cfg.Front
	var errs []error
	if cfg.Listen == "" {
		errs = append(errs, errors.New("--cluster needs --listen: the front serves the hiloop API over TLS"))
	}
	if cfg.TLSCertFile != "" {
		errs = append(errs, errors.New("--cluster with --tls-cert: every front replica serves the certificate kept in the Secret hiloop-front of --cluster-namespace; --tls-san names what it is good for"))
	}
	for flag, ns := range map[string]string{"--cluster-namespace": fc.Namespace, "--default-user-namespace": fc.DefaultUserNamespace} {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("invalid %s %q: %s", flag, ns, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// RunFront runs sandboxd as a cluster's front until ctx ends.
func RunFront(ctx context.Context, cfg Config) error {
	d, err := NewFront(ctx, cfg)
	if err != nil {
		return err
	}
	return d.ServeFront(ctx)
}

// NewFront connects to the cluster, loads the front's TLS identity and prepares its caches,
// its users and the controller; ServeFront starts them and serves.
func NewFront(ctx context.Context, cfg Config) (*Daemon, error) {
	kc := cfg.Front.Kubeconfig
	if kc == "" {
		kc = agent.InCluster
	}
	rc, err := agent.RestConfig(kc)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	fr, err := front.Open(ctx, rc, front.Options{
		Namespace:            cfg.Front.Namespace,
		DefaultUserNamespace: cfg.Front.DefaultUserNamespace,
		TLSSANs:              cfg.TLSSANs,
		Log:                  cfg.Log.With("component", "front"),
	})
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, log: cfg.Log, front: fr, users: fr.Users}
	d.auth = newAuthenticator(d.users, d.log)
	d.tls = daemonTLS{CA: fr.Identity.UsersCA, Cert: fr.Identity.Serving, Fingerprint: fr.Identity.Fingerprint}
	return d, nil
}

// ServeFront starts the front's manager (caches, users, controller) and serves the API on the
// unix socket (the local admin: `kubectl exec` into the front's Pod) and the TLS listener
// until ctx ends.
func (d *Daemon) ServeFront(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 4)
	if err := d.front.Start(ctx, errc); err != nil {
		return err
	}
	handler := withVersion(d.cfg.Version, newMux(d.frontRoutes(), nil, d.log, d.auditFront))
	apis, err := d.listenAPI(handler)
	if err != nil {
		return err
	}
	for _, a := range apis {
		a.logServing(d.log)
		go func() { errc <- a.srv.Serve(a.ln) }()
	}
	select {
	case <-ctx.Done():
		d.log.Info("stopping on a signal: finishing the requests in flight")
	case err := <-errc:
		if err != nil {
			d.log.Error("serve", "err", err)
		}
	}
	shutdownCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	for _, a := range apis {
		_ = a.srv.Shutdown(shutdownCtx)
	}
	os.Remove(d.cfg.Socket)
	cancel() // the manager releases the controller's Lease on the way out
	return nil
}

// auditFront is the front's audit of a call: a line in its log. A front keeps no state; the
// node agents keep the audit of what reaches them (GET /v1/audit gathers theirs).
func (d *Daemon) auditFront(rec api.AuditRecord) {
	d.log.Info("audit", "action", rec.Action, "user", rec.User, "as", rec.As, "method", rec.Method, "route", rec.Route, "status", rec.Status, "message", rec.Message)
}

// frontRole is who answers a route on a cluster's front.
type frontRole string

const (
	// roleFront: the front itself, from the cluster's resources (sandboxes, users, trust).
	roleFront frontRole = "front"
	// roleSandboxAgent: the node agent holding the sandbox the path names (proxySandbox).
	roleSandboxAgent frontRole = "sandbox's agent"
	// roleFoundAgent: the node agent that has the session or snapshot the path names
	// (proxyFound).
	roleFoundAgent frontRole = "agent that has it"
	// roleEveryAgent: every ready node agent, the answers merged (fanOut).
	roleEveryAgent frontRole = "every agent"
	// roleNone: not served on a cluster yet (unsupported_capability).
	roleNone frontRole = "none"
)

// frontOwn are the routes the front answers itself, and the lists it gathers from every agent.
func (d *Daemon) frontOwn() map[string]handlerFunc {
	return map[string]handlerFunc{
		"GET /v1/version":                        d.frontVersion,
		"GET /v1/sandboxes":                      d.frontListSandboxes,
		"POST /v1/sandboxes":                     d.frontCreateSandbox,
		"GET /v1/sandboxes/{name}":               d.frontGetSandbox,
		"DELETE /v1/sandboxes/{name}":            d.frontDeleteSandbox,
		"POST /v1/sandboxes/{name}/start":        d.frontStartSandbox,
		"POST /v1/sandboxes/{name}/stop":         d.frontStopSandbox,
		"POST /v1/sessions":                      d.frontCreateSession,
		"POST /v1/users":                         d.createUser,
		"GET /v1/users":                          d.listUsers,
		"GET /v1/users/{user}":                   d.getUser,
		"DELETE /v1/users/{user}":                d.deleteUser,
		"POST /v1/users/{user}/trust-token":      d.newTrustToken,
		"POST /v1/users/{user}/tokens":           d.createToken,
		"GET /v1/users/{user}/tokens":            d.listTokens,
		"DELETE /v1/users/{user}/tokens/{token}": d.revokeToken,
		"POST " + trustPath:                      d.trust,
		"GET /v1/whoami":                         d.whoami,
	}
}

// frontLists are the lists the front gathers from every ready agent.
func (d *Daemon) frontLists() map[string]handlerFunc {
	return map[string]handlerFunc{
		"GET /v1/sessions":  fanOut(mergeSessions)(d),
		"GET /v1/snapshots": fanOut(mergeSnapshots)(d),
		"GET /v1/audit":     fanOut(mergeAudit)(d),
		"GET /v1/usage":     fanOut(mergeUsage)(d),
	}
}

// roleOf is who answers rt on a front.
func (d *Daemon) roleOf(rt route) frontRole {
	id := rt.method + " " + rt.pattern
	switch {
	case d.frontOwn()[id] != nil:
		return roleFront
	case d.frontLists()[id] != nil:
		return roleEveryAgent
	case strings.HasPrefix(rt.pattern, "/v1/sandboxes/{name}/"):
		return roleSandboxAgent
	case strings.HasPrefix(rt.pattern, "/v1/sessions/{id}"), strings.HasPrefix(rt.pattern, "/v1/snapshots/{snapshot}"):
		return roleFoundAgent
	}
	return roleNone
}

// frontRoutes is the front's API: the single host's route table, row by row (roleOf), with the
// same scopes.
func (d *Daemon) frontRoutes() []route {
	own, lists := d.frontOwn(), d.frontLists()
	var rows []route
	for _, rt := range d.routeTable() {
		// The front keeps no receipts: its own calls are idempotent by what they write (the
		// create's key rides on its Sandbox), and a routed call's key goes to the agent.
		rt.idempotent = false
		id := rt.method + " " + rt.pattern
		switch d.roleOf(rt) {
		case roleFront:
			rt.handle = own[id]
		case roleEveryAgent:
			rt.handle = lists[id]
		case roleSandboxAgent:
			rt.handle = d.proxySandbox
		case roleFoundAgent:
			rt.handle = d.proxyFound
		default:
			rt.handle = notOnCluster
		}
		rt.handle = d.frontGuard(rt)
		rows = append(rows, rt)
	}
	return rows
}

// frontGuard is the front's guard of rt: the single host's checks of the scopes that need no
// store (lists, admins, accounts); a sandbox's, session's or snapshot's owner is checked where
// it is found (in the front's cache, or by its agent, which acts as the same user).
func (d *Daemon) frontGuard(rt route) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		switch rt.scope {
		case scopeSandbox, scopeSession, scopeSnapshot:
		default:
			var err error
			if r, err = d.check(rt.scope, r); err != nil {
				return err
			}
		}
		return rt.handle(w, r)
	}
}

// notOnCluster answers a route a cluster's front does not serve yet.
func notOnCluster(w http.ResponseWriter, r *http.Request) error {
	return api.Errorf(api.CodeUnsupported, "%s %s is not served on a cluster yet", r.Method, r.Pattern)
}

func (d *Daemon) frontVersion(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, http.StatusOK, api.VersionInfo{
		Version:        d.cfg.Version,
		API:            api.Version,
		Capabilities:   []string{"exec", "sessions", "snapshots", "cluster"},
		TLSFingerprint: d.tls.Fingerprint,
		TLSEndpoint:    d.tlsEndpoint,
	})
}

// frontKey is the key of the sandbox r's {name} gives, in the caller's namespace, and that
// namespace (the owner).
func frontKey(r *http.Request) (owner, key string, err error) {
	owner = principal(r).Namespace()
	key, err = qualify(r, "sandbox", r.PathValue("name"))
	return owner, key, err
}

func (d *Daemon) frontListSandboxes(w http.ResponseWriter, r *http.Request) error {
	owner, err := listedNamespace(r)
	if err != nil {
		return err
	}
	list, err := d.front.List(r.Context(), owner)
	if err != nil {
		return err
	}
	out := api.SandboxList{Sandboxes: make([]api.Sandbox, 0, len(list))}
	for i := range list {
		out.Sandboxes = append(out.Sandboxes, front.Present(&list[i]))
	}
	return writeJSON(w, http.StatusOK, out)
}

// frontCreateSandbox makes a Sandbox and answers once it runs (201), or once it waits for a
// node the scheduler finds none for (201, state pending, the scheduler's message).
func (d *Daemon) frontCreateSandbox(w http.ResponseWriter, r *http.Request) error {
	var p api.SandboxesPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	idem := r.Header.Get(api.IdempotencyKeyHeader)
	if len(idem) > maxKeyLen {
		return api.Errorf(api.CodeInvalidArgument, "Idempotency-Key is longer than %d characters", maxKeyLen)
	}
	owner := principal(r).Namespace()
	var ps api.Problems
	ps.Add("", p.Normalize())
	if err := ps.Err(); err != nil {
		return err
	}
	switch {
	case p.FromSnapshot != "":
		return api.Errorf(api.CodeUnsupported, "from_snapshot is not served on a cluster yet")
	case len(p.Secrets) > 0:
		return api.Errorf(api.CodeUnsupported, "secrets are not served on a cluster yet")
	}
	sb, err := d.front.Create(r.Context(), owner, identity.Key(owner, p.Name), p, idem)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, sb)
}

func (d *Daemon) frontGetSandbox(w http.ResponseWriter, r *http.Request) error {
	owner, key, err := frontKey(r)
	if err != nil {
		return err
	}
	sb, err := d.front.Get(r.Context(), owner, key)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, front.Present(sb))
}

// frontDeleteSandbox deletes a Sandbox: 204 once its agent has deleted the workspace, 202 with
// the sandbox still deleting when that takes longer than front.DeleteWait (its node is not
// ready, say); it goes when the agent is back.
func (d *Daemon) frontDeleteSandbox(w http.ResponseWriter, r *http.Request) error {
	owner, key, err := frontKey(r)
	if err != nil {
		return err
	}
	left, err := d.front.Delete(r.Context(), owner, key)
	if err != nil {
		return err
	}
	if left != nil {
		return writeJSON(w, http.StatusAccepted, left)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (d *Daemon) frontStartSandbox(w http.ResponseWriter, r *http.Request) error {
	return d.frontSetStopped(w, r, false)
}

func (d *Daemon) frontStopSandbox(w http.ResponseWriter, r *http.Request) error {
	return d.frontSetStopped(w, r, true)
}

func (d *Daemon) frontSetStopped(w http.ResponseWriter, r *http.Request, stopped bool) error {
	owner, key, err := frontKey(r)
	if err != nil {
		return err
	}
	sb, err := d.front.SetStopped(r.Context(), owner, key, stopped)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sb)
}

// frontNamespaceEmpty refuses a new user's name while Sandboxes of a removed user of that name
// are still in the cluster.
func (d *Daemon) frontNamespaceEmpty(ctx context.Context, name string) error {
	list, err := d.front.List(ctx, name)
	if err != nil || len(list) == 0 {
		return err
	}
	return api.Errorf(api.CodeUserExists, "the name %q was a user's who still owns %d sandbox(es): delete them first (e.g. `hiloop --as %s sandbox list`), so that a new user of the name does not get them", name, len(list), name)
}
