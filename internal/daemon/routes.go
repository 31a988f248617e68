package daemon

import (
	"context"
	"fmt"
	"net/http"

	"github.com/hiloop/hiloop/pkg/api"
)

// routes is the whole API, one row per endpoint.
func (d *Daemon) routes() []route {
	return []route{
		{method: "GET", pattern: "/v1/version", handle: d.getVersion},
		{method: "GET", pattern: "/v1/sandboxes", handle: d.listSandboxes},
		{method: "POST", pattern: "/v1/sandboxes", handle: d.createSandbox, idempotent: true},
		{method: "GET", pattern: "/v1/sandboxes/{name}", handle: d.getSandbox},
		{method: "DELETE", pattern: "/v1/sandboxes/{name}", handle: d.deleteSandbox, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/sandboxes/{name}/start", handle: d.startSandbox, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/sandboxes/{name}/stop", handle: d.stopSandbox, idempotent: true, noBody: true},
		{method: "GET", pattern: "/v1/sandboxes/{name}/exec", handle: d.execSandbox},
		{method: "GET", pattern: "/v1/sandboxes/{name}/ports/{port}", handle: d.portStream},
		{method: "POST", pattern: "/v1/sandboxes/{name}/exposures", handle: d.postExposure, idempotent: true},
		{method: "GET", pattern: "/v1/sandboxes/{name}/exposures", handle: d.listExposures},
		{method: "DELETE", pattern: "/v1/sandboxes/{name}/exposures/{port}", handle: d.deleteExposure, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/sandboxes/{name}/grow", handle: d.growSandbox, idempotent: true},
		{method: "GET", pattern: "/v1/sandboxes/{name}/egress/log", handle: d.sandboxEgressLog},
		{method: "POST", pattern: "/v1/sandboxes/{name}/restore", handle: d.restoreSandbox, idempotent: true},
		{method: "PUT", pattern: "/v1/sandboxes/{name}/egress", handle: d.putEgress, idempotent: true},
		{method: "PUT", pattern: "/v1/sandboxes/{name}/budget", handle: d.putSandboxBudget, idempotent: true},
		{method: "POST", pattern: "/v1/sandboxes/{name}/snapshots", handle: d.createSnapshot, idempotent: true},
		{method: "GET", pattern: "/v1/sandboxes/{name}/snapshots", handle: d.listSnapshots},
		{method: "GET", pattern: "/v1/snapshots", handle: d.listSnapshots},
		{method: "GET", pattern: "/v1/snapshots/{snapshot}", handle: d.getSnapshot},
		{method: "DELETE", pattern: "/v1/snapshots/{snapshot}", handle: d.deleteSnapshot, idempotent: true, noBody: true},
		{method: "GET", pattern: "/v1/sandboxes/{name}/ssh", handle: d.sshInfo},
		{method: "GET", pattern: "/v1/ssh-keys", handle: d.listSSHKeys},
		{method: "POST", pattern: "/v1/ssh-keys", handle: d.addSSHKey, idempotent: true},
		{method: "DELETE", pattern: "/v1/ssh-keys/{key}", handle: d.removeSSHKey, idempotent: true, noBody: true},
		{method: "GET", pattern: "/v1/sessions", handle: d.listSessions},
		{method: "POST", pattern: "/v1/sessions", handle: d.createSession, idempotent: true},
		{method: "GET", pattern: "/v1/sessions/{id}", handle: d.getSession},
		{method: "DELETE", pattern: "/v1/sessions/{id}", handle: d.deleteSession, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/sessions/{id}/prompt", handle: d.promptSession, idempotent: true},
		{method: "POST", pattern: "/v1/sessions/{id}/cancel", handle: d.cancelSession, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/sessions/{id}/permissions/{tool_call_id}", handle: d.answerPermission, idempotent: true},
		{method: "GET", pattern: "/v1/sessions/{id}/events", handle: d.sessionEvents},
		{method: "GET", pattern: "/v1/sessions/{id}/stream", handle: d.streamSession},
		{method: "PUT", pattern: "/v1/sessions/{id}/budget", handle: d.putSessionBudget, idempotent: true},
		{method: "GET", pattern: "/v1/usage", handle: d.getUsage},
		// Creating and rotating a secret honour no Idempotency-Key: a receipt keeps a hash of the
		// request body, which holds the value, and the bbolt file must reveal nothing of it.
		{method: "POST", pattern: "/v1/secrets", handle: d.createSecret},
		{method: "GET", pattern: "/v1/secrets", handle: d.listSecrets},
		{method: "GET", pattern: "/v1/secrets/{secret}", handle: d.getSecret},
		{method: "DELETE", pattern: "/v1/secrets/{secret}", handle: d.deleteSecret, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/secrets/{secret}/rotate", handle: d.rotateSecret},
		{method: "POST", pattern: "/v1/sandboxes/{name}/secrets", handle: d.attachSandboxSecret, idempotent: true},
		{method: "PUT", pattern: "/v1/logins/{provider}", handle: d.putLogin},
		{method: "GET", pattern: "/v1/logins", handle: d.listLogins},
		{method: "GET", pattern: "/v1/logins/{provider}", handle: d.getLogin},
		{method: "DELETE", pattern: "/v1/logins/{provider}", handle: d.deleteLogin, idempotent: true, noBody: true},
		{method: "GET", pattern: "/v1/audit", handle: d.auditRecords},
		{method: "DELETE", pattern: "/v1/sandboxes/{name}/secrets/{secret}", handle: d.detachSandboxSecret, idempotent: true, noBody: true},
		// The users and their credentials (users.go). None honours an Idempotency-Key but the
		// deletes: a receipt would keep the answer, which holds a token's value.
		{method: "POST", pattern: "/v1/users", handle: d.createUser},
		{method: "GET", pattern: "/v1/users", handle: d.listUsers},
		{method: "GET", pattern: "/v1/users/{user}", handle: d.getUser},
		{method: "DELETE", pattern: "/v1/users/{user}", handle: d.deleteUser, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/users/{user}/trust-token", handle: d.newTrustToken, noBody: true},
		{method: "POST", pattern: "/v1/users/{user}/tokens", handle: d.createToken},
		{method: "GET", pattern: "/v1/users/{user}/tokens", handle: d.listTokens},
		{method: "DELETE", pattern: "/v1/users/{user}/tokens/{token}", handle: d.revokeToken, idempotent: true, noBody: true},
		{method: "POST", pattern: trustPath, handle: d.trust},
		{method: "GET", pattern: "/v1/whoami", handle: d.whoami},
		{method: "GET", pattern: "/v1/images", handle: d.listImages},
		{method: "GET", pattern: "/v1/images/{name}", handle: d.getImage},
		{method: "DELETE", pattern: "/v1/images/{name}", handle: d.deleteImage, idempotent: true, noBody: true},
		{method: "POST", pattern: "/v1/images/{name}/build", handle: d.buildImage},
		// Import and pull honour no Idempotency-Key: an archive is too large to hash again, and
		// a pull's body may hold a registry login the bbolt file must not keep a trace of.
		{method: "POST", pattern: "/v1/images/{name}/import", handle: d.importImage},
		{method: "POST", pattern: "/v1/images/{name}/pull", handle: d.pullImage},
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
		SSHEndpoint:    d.sshEndpoint,
	})
}

func (d *Daemon) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	list, err := d.sandboxes.List(r.Context())
	if err != nil {
		return err
	}
	for i := range list {
		if list[i], err = d.withSecrets(list[i]); err != nil {
			return err
		}
		if list[i], err = d.withSandboxUsage(list[i]); err != nil {
			return err
		}
		list[i] = d.withExposures(list[i])
	}
	return writeJSON(w, http.StatusOK, api.SandboxList{Sandboxes: list})
}

func (d *Daemon) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var p api.SandboxesPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if err := d.checkCreate(&p); err != nil {
		return err
	}
	sb, err := d.sandboxes.Create(r.Context(), p)
	if err != nil {
		return err
	}
	if len(p.Secrets) > 0 {
		if err := d.secrets.Attach(sb.ID, sb.Name, p.Secrets); err != nil {
			return err
		}
	}
	// No harness runs before the answer, so the budget holds from the sandbox's first request.
	err = d.setCreateBudget(sb.ID, "", p.ModelBudgetTokens, func() error {
		return d.sandboxes.Delete(context.WithoutCancel(r.Context()), sb.Name, false)
	})
	if err != nil {
		return err
	}
	if sb, err = d.withSandboxUsage(sb); err != nil {
		return err
	}
	return d.writeSandbox(w, http.StatusCreated, sb)
}

// checkCreate normalises a create request and refuses it, naming every problem at once, when
// any of its values is invalid, above what the host has, or names a secret that does not exist;
// the refusal then also says what else stands in its way (sandbox.Manager.CheckCreate). A
// request with valid values goes on to the manager's Create, which refuses what the host
// lacks for it together.
func (d *Daemon) checkCreate(p *api.SandboxesPost) error {
	defaultCPUs, defaultMemory := p.CPUs == 0, p.MemoryMB == 0
	var ps api.Problems
	ps.Add("", p.Normalize())
	d.host.fitHost(p, defaultCPUs, defaultMemory, &ps)
	// The secrets must exist before anything is made; one deleted in the meantime fails the
	// attach after the create, and the sandbox is left without it.
	for i, a := range p.Secrets {
		if at := fmt.Sprintf("secrets[%d]", i); !ps.Has(at) {
			_, err := d.secrets.Get(a.Secret)
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
	return d.writeSandbox(w, http.StatusOK, sb)
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
	return writeJSON(w, http.StatusOK, sb)
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
	return writeJSON(w, http.StatusOK, sb)
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
	return writeJSON(w, http.StatusOK, sb)
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
	sb, err := d.sandboxes.Restore(r.Context(), name, p.Snapshot)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sb)
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
	return writeJSON(w, http.StatusOK, sb)
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
	sn, err := d.sandboxes.Snapshot(r.Context(), name, p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, sn)
}

// listSnapshots lists every snapshot, or a sandbox's when the path names one.
func (d *Daemon) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	sandbox := ""
	if r.PathValue("name") != "" {
		name, err := pathName(r)
		if err != nil {
			return err
		}
		if _, err := d.sandboxes.Get(r.Context(), name); err != nil {
			return err
		}
		sandbox = name
	}
	list, err := d.sandboxes.ListSnapshots(sandbox)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.SnapshotList{Snapshots: list})
}

func (d *Daemon) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	sn, err := d.sandboxes.GetSnapshot(r.PathValue("snapshot"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sn)
}

func (d *Daemon) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	if err := d.sandboxes.DeleteSnapshot(r.Context(), r.PathValue("snapshot")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
