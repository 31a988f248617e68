package daemon

import (
	"context"
	"fmt"
	"net/http"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/pkg/api"
)

// routes is the whole API, one row per endpoint, each behind its owner scope's guard.
func (d *Daemon) routes() []route { return d.guarded(d.routeTable()) }

// guarded puts each of rows behind its scope's guard.
func (d *Daemon) guarded(rows []route) []route {
	for i := range rows {
		rows[i].handle = d.guard(rows[i])
	}
	return rows
}

// routeTable is the whole API, one row per endpoint, with whose resources each reaches.
func (d *Daemon) routeTable() []route {
	return []route{
		{method: "GET", pattern: "/v1/version", scope: scopePublic, handle: d.getVersion},
		{method: "GET", pattern: "/v1/sandboxes", scope: scopeList, handle: d.listSandboxes},
		{method: "POST", pattern: "/v1/sandboxes", scope: scopeList, handle: d.createSandbox, idempotent: true},
		{method: "GET", pattern: "/v1/sandboxes/{name}", scope: scopeSandbox, handle: d.getSandbox},
		{method: "DELETE", pattern: "/v1/sandboxes/{name}", scope: scopeSandbox, handle: d.deleteSandbox, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/sandboxes/{name}/start", scope: scopeSandbox, handle: d.startSandbox, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/sandboxes/{name}/stop", scope: scopeSandbox, handle: d.stopSandbox, idempotent: true, noBody: true},
		{method: "GET", pattern: "/v1/sandboxes/{name}/exec", scope: scopeSandbox, handle: d.execSandbox},
		{method: "GET", pattern: "/v1/sandboxes/{name}/ports/{port}", scope: scopeSandbox, handle: d.portStream},
		{method: "POST", pattern: "/v1/sandboxes/{name}/exposures", scope: scopeSandbox, handle: d.postExposure, idempotent: true},
		{method: "GET", pattern: "/v1/sandboxes/{name}/exposures", scope: scopeSandbox, handle: d.listExposures},
		{method: "DELETE", pattern: "/v1/sandboxes/{name}/exposures/{port}", scope: scopeSandbox, handle: d.deleteExposure, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/sandboxes/{name}/grow", scope: scopeSandbox, handle: d.growSandbox, idempotent: true},
		{method: "GET", pattern: "/v1/sandboxes/{name}/egress/log", scope: scopeSandbox, handle: d.sandboxEgressLog},
		{method: "POST", pattern: "/v1/sandboxes/{name}/restore", scope: scopeSandbox, handle: d.restoreSandbox, idempotent: true},
		{method: "PUT", pattern: "/v1/sandboxes/{name}/egress", scope: scopeSandbox, handle: d.putEgress, idempotent: true},
		{method: "PUT", pattern: "/v1/sandboxes/{name}/budget", scope: scopeSandbox, handle: d.putSandboxBudget, idempotent: true},
		{method: "POST", pattern: "/v1/sandboxes/{name}/snapshots", scope: scopeSandbox, handle: d.createSnapshot, idempotent: true},
		{method: "GET", pattern: "/v1/sandboxes/{name}/snapshots", scope: scopeSandbox, handle: d.listSnapshots},
		{method: "GET", pattern: "/v1/snapshots", scope: scopeList, handle: d.listSnapshots},
		{method: "GET", pattern: "/v1/snapshots/{snapshot}", scope: scopeSnapshot, handle: d.getSnapshot},
		{method: "DELETE", pattern: "/v1/snapshots/{snapshot}", scope: scopeSnapshot, handle: d.deleteSnapshot, idempotent: true, noBody: true},
		{method: "GET", pattern: "/v1/sandboxes/{name}/ssh", scope: scopeSandbox, handle: d.sshInfo},
		{method: "GET", pattern: "/v1/ssh-keys", scope: scopeSSHKey, handle: d.listSSHKeys},
		{method: "POST", pattern: "/v1/ssh-keys", scope: scopeSSHKey, handle: d.addSSHKey, idempotent: true},
		{method: "DELETE", pattern: "/v1/ssh-keys/{key}", scope: scopeSSHKey, handle: d.removeSSHKey, idempotent: true, noBody: true},
		{method: "GET", pattern: "/v1/sessions", scope: scopeList, handle: d.listSessions},
		{method: "POST", pattern: "/v1/sessions", scope: scopeList, handle: d.createSession, idempotent: true},
		{method: "GET", pattern: "/v1/sessions/{id}", scope: scopeSession, handle: d.getSession},
		{method: "DELETE", pattern: "/v1/sessions/{id}", scope: scopeSession, handle: d.deleteSession, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/sessions/{id}/prompt", scope: scopeSession, handle: d.promptSession, idempotent: true},
		{method: "POST", pattern: "/v1/sessions/{id}/cancel", scope: scopeSession, handle: d.cancelSession, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/sessions/{id}/permissions/{tool_call_id}", scope: scopeSession, handle: d.answerPermission, idempotent: true},
		{method: "GET", pattern: "/v1/sessions/{id}/events", scope: scopeSession, handle: d.sessionEvents},
		{method: "GET", pattern: "/v1/sessions/{id}/stream", scope: scopeSession, handle: d.streamSession},
		{method: "PUT", pattern: "/v1/sessions/{id}/budget", scope: scopeSession, handle: d.putSessionBudget, idempotent: true},
		{method: "GET", pattern: "/v1/usage", scope: scopeList, handle: d.getUsage},
		// Creating and rotating a secret honour no Idempotency-Key: a receipt keeps a hash of the
		// request body, which holds the value, and the bbolt file must reveal nothing of it.
		{method: "POST", pattern: "/v1/secrets", scope: scopeSecret, handle: d.createSecret},
		{method: "GET", pattern: "/v1/secrets", scope: scopeSecret, handle: d.listSecrets},
		{method: "GET", pattern: "/v1/secrets/{secret}", scope: scopeSecret, handle: d.getSecret},
		{method: "DELETE", pattern: "/v1/secrets/{secret}", scope: scopeSecret, handle: d.deleteSecret, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/secrets/{secret}/rotate", scope: scopeSecret, handle: d.rotateSecret},
		{method: "POST", pattern: "/v1/sandboxes/{name}/secrets", scope: scopeSandbox, handle: d.attachSandboxSecret, idempotent: true},
		{method: "PUT", pattern: "/v1/logins/{provider}", scope: scopeLogin, handle: d.putLogin},
		{method: "GET", pattern: "/v1/logins", scope: scopeLogin, handle: d.listLogins},
		{method: "GET", pattern: "/v1/logins/{provider}", scope: scopeLogin, handle: d.getLogin},
		{method: "DELETE", pattern: "/v1/logins/{provider}", scope: scopeLogin, handle: d.deleteLogin, idempotent: true, noBody: true},
		{method: "GET", pattern: "/v1/audit", scope: scopeUser, handle: d.auditRecords},
		{method: "DELETE", pattern: "/v1/sandboxes/{name}/secrets/{secret}", scope: scopeSandbox, handle: d.detachSandboxSecret, idempotent: true, noBody: true},
		// The users and their credentials (users.go). None honours an Idempotency-Key but the
		// deletes: a receipt would keep the answer, which holds a token's value.
		{method: "POST", pattern: "/v1/users", scope: scopeUser, handle: d.createUser},
		{method: "GET", pattern: "/v1/users", scope: scopeUser, handle: d.listUsers},
		{method: "GET", pattern: "/v1/users/{user}", scope: scopeAccount, handle: d.getUser},
		{method: "DELETE", pattern: "/v1/users/{user}", scope: scopeUser, handle: d.deleteUser, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/users/{user}/trust-token", scope: scopeUser, handle: d.newTrustToken, noBody: true},
		{method: "POST", pattern: "/v1/users/{user}/tokens", scope: scopeAccount, handle: d.createToken},
		{method: "GET", pattern: "/v1/users/{user}/tokens", scope: scopeAccount, handle: d.listTokens},
		{method: "DELETE", pattern: "/v1/users/{user}/tokens/{token}", scope: scopeAccount, handle: d.revokeToken, idempotent: true, noBody: true},
		{method: "POST", pattern: trustPath, scope: scopePublic, handle: d.trust},
		{method: "GET", pattern: "/v1/whoami", scope: scopePublic, handle: d.whoami},
		{method: "GET", pattern: "/v1/images", scope: scopeImage, handle: d.listImages},
		{method: "GET", pattern: "/v1/images/{name}", scope: scopeImage, handle: d.getImage},
		{method: "DELETE", pattern: "/v1/images/{name}", scope: scopeImageMutation, handle: d.deleteImage, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/images/{name}/build", scope: scopeImageMutation, handle: d.buildImage},
		// Import and pull honour no Idempotency-Key: an archive is too large to hash again, and
		// a pull's body may hold a registry login the bbolt file must not keep a trace of.
		{method: "POST", pattern: "/v1/images/{name}/import", scope: scopeImageMutation, handle: d.importImage},
		{method: "POST", pattern: "/v1/images/{name}/pull", scope: scopeImageMutation, handle: d.pullImage},
	}
}

func (d *Daemon) getVersion(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, http.StatusOK, api.VersionInfo{
		Version:        d.cfg.Version,
		API:            api.Version,
		VolumeDriver:   d.volumes.Name(),
		Capabilities:   d.capabilities(),
		Spares:         d.sandboxes.Spares(),
		TLSFingerprint: d.tls.Fingerprint,
		TLSEndpoint:    d.tlsEndpoint,
		SSHEndpoint:    d.sshEndpoint,
	})
}

func (d *Daemon) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	all, err := d.sandboxes.List(r.Context())
	if err != nil {
		return err
	}
	show := visible(r)
	list := make([]api.Sandbox, 0, len(all))
	for _, sb := range all {
		if !show(sb.Name) {
			continue
		}
		if sb, err = d.withSecrets(sb); err != nil {
			return err
		}
		if sb, err = d.withSandboxUsage(sb); err != nil {
			return err
		}
		list = append(list, present(d.withExposures(sb)))
	}
	return writeJSON(w, http.StatusOK, api.SandboxList{Sandboxes: list})
}

func (d *Daemon) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var p api.SandboxesPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	sb, err := d.create(r.Context(), principal(r).Namespace(), p)
	if err != nil {
		return err
	}
	return d.writeSandbox(w, http.StatusCreated, present(sb))
}

// create makes the sandbox p asks for in namespace ns (its owner's) and returns it with its
// usage: the one path of every create, the API's and a node agent's (agentSandboxes). p.Name
// is the bare name; the sandbox is kept under its key in ns.
func (d *Daemon) create(ctx context.Context, ns string, p api.SandboxesPost) (api.Sandbox, error) {
	if err := d.checkCreate(ns, &p); err != nil {
		return api.Sandbox{}, err
	}
	sb, err := d.sandboxes.Create(ctx, p)
	if err != nil {
		return api.Sandbox{}, err
	}
	if len(p.Secrets) > 0 {
		if err := d.secrets.Attach(sb.ID, sb.Name, p.Secrets); err != nil {
			return api.Sandbox{}, err
		}
	}
	// No harness runs before the answer, so the budget holds from the sandbox's first request.
	err = d.setCreateBudget(sb.ID, "", p.ModelBudgetTokens, func() error {
		return d.sandboxes.Delete(context.WithoutCancel(ctx), sb.Name, false)
	})
	if err != nil {
		return api.Sandbox{}, err
	}
	return d.withSandboxUsage(sb)
}

// checkCreate normalises a create request and refuses it, naming every problem at once, when
// any of its values is invalid, above what the host has, or names a secret its owner does not
// have (another user's is not found); the refusal then also says what else stands in its way
// (sandbox.Manager.CheckCreate). A request with valid values goes on to the manager's Create,
// which refuses what the host lacks for it together. The names it gives (its own, its
// snapshot's) become keys of namespace ns, the caller's, so that a name taken in another
// namespace is not in its way.
func (d *Daemon) checkCreate(ns string, p *api.SandboxesPost) error {
	defaultCPUs, defaultMemory := p.CPUs == 0, p.MemoryMB == 0
	var ps api.Problems
	ps.Add("", p.Normalize())
	if !ps.Has("name") {
		p.Name = identity.Key(ns, p.Name)
	}
	if p.FromSnapshot != "" && !ps.Has("from_snapshot") {
		p.FromSnapshot = identity.Key(ns, p.FromSnapshot)
	}
	d.host.fitHost(p, defaultCPUs, defaultMemory, &ps)
	// The secrets must exist before anything is made; one deleted in the meantime fails the
	// attach after the create, and the sandbox is left without it.
	for i, a := range p.Secrets {
		if at := fmt.Sprintf("secrets[%d]", i); !ps.Has(at) {
			_, err := d.secrets.Get(ns, a.Secret)
			ps.Add(at+".secret", err)
		}
	}
	if ps.Len() > 0 {
		d.sandboxes.CheckCreate(*p, &ps)
	}
	return ps.Err()
}

func (d *Daemon) getSandbox(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	sb, err := d.sandboxes.Get(r.Context(), name)
	if err != nil {
		return err
	}
	if sb, err = d.withSandboxUsage(sb); err != nil {
		return err
	}
	return d.writeSandbox(w, http.StatusOK, present(sb))
}

func (d *Daemon) deleteSandbox(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	withSnapshots, err := boolQuery(r, "with_snapshots")
	if err != nil {
		return err
	}
	if err := d.sandboxes.Delete(r.Context(), name, withSnapshots); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (d *Daemon) startSandbox(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	sb, err := d.sandboxes.Start(r.Context(), name)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, present(sb))
}

func (d *Daemon) stopSandbox(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	sb, err := d.sandboxes.Stop(r.Context(), name)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, present(sb))
}

func (d *Daemon) growSandbox(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var p api.GrowPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	sb, err := d.sandboxes.Grow(r.Context(), name, p.WorkspaceGiB)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, present(sb))
}

func (d *Daemon) restoreSandbox(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var p api.RestorePost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	snapshot, err := qualify(r, "snapshot", p.Snapshot)
	if err != nil {
		return err
	}
	sb, err := d.sandboxes.Restore(r.Context(), name, snapshot)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, present(sb))
}

// putEgress replaces a sandbox's egress policy; a running sandbox's next connections follow it.
func (d *Daemon) putEgress(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var p api.EgressPut
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if err := p.Normalize(); err != nil {
		return err
	}
	sb, err := d.sandboxes.SetEgressPolicy(r.Context(), name, p.Egress)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, present(sb))
}

func (d *Daemon) createSnapshot(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	var p api.SnapshotsPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	// A snapshot is its sandbox's owner's, named in their namespace; the manager names one
	// that has no name after its sandbox, whose key is of that namespace.
	if p.Name != "" {
		if p.Name, err = qualify(r, "snapshot", p.Name); err != nil {
			return err
		}
	}
	sn, err := d.sandboxes.Snapshot(r.Context(), name, p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, presentSnapshot(sn))
}

// listSnapshots lists the caller's snapshots (every user's with all_users), or a sandbox's
// when the path names one.
func (d *Daemon) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	sandbox := ""
	show := func(string) bool { return true }
	if r.PathValue("name") != "" {
		name, err := pathName(r)
		if err != nil {
			return err
		}
		sandbox = name
	} else {
		show = visible(r)
	}
	all, err := d.sandboxes.ListSnapshots(sandbox)
	if err != nil {
		return err
	}
	list := make([]api.Snapshot, 0, len(all))
	for _, sn := range all {
		if show(sn.Name) {
			list = append(list, presentSnapshot(sn))
		}
	}
	return writeJSON(w, http.StatusOK, api.SnapshotList{Snapshots: list})
}

func (d *Daemon) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	sn, err := d.sandboxes.GetSnapshot(r.PathValue("snapshot"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, presentSnapshot(sn))
}

func (d *Daemon) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	if err := d.sandboxes.DeleteSnapshot(r.Context(), r.PathValue("snapshot")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
