package daemon

import (
	"net/http"
	"time"

	"github.com/hiloop/hiloop/internal/gateway"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/secrets"
	"github.com/hiloop/hiloop/pkg/api"
)

// secretBindings returns the lookup the gateway asks, for each connection of the sandbox id,
// which secrets go in its requests to host. It reads the store each time, so an attach,
// detach, rotation or delete applies to the next connection and request at once; each
// binding's Value reads the current value at request time and is empty once the placeholder's
// attachment is gone, so a detached placeholder is worthless even on a connection opened
// before.
func secretBindings(st *secrets.Store, id string, log func(msg string, args ...any)) func(host string) []gateway.Binding {
	return func(host string) []gateway.Binding {
		atts, secs, err := st.Bound(id)
		if err != nil {
			log("read the secrets of a sandbox", "id", id, "err", err)
			return nil
		}
		out := make([]gateway.Binding, 0, len(atts))
		for i, a := range atts {
			s := secs[i]
			out = append(out, gateway.Binding{
				Name:        s.Name,
				Header:      s.Header,
				Format:      s.Format,
				PathPrefix:  s.PathPrefix,
				Hosts:       s.Hosts,
				Placeholder: a.Placeholder,
				Value:       func() []byte { return st.Value(id, a.Secret, a.Placeholder) },
			})
		}
		return out
	}
}

// secretEnv is the variables of the secrets attached to the sandbox id: each holds the
// placeholder, never the value.
func secretEnv(st *secrets.Store, id string) ([]string, error) {
	atts, err := st.Attachments(id)
	if err != nil {
		return nil, err
	}
	env := make([]string, 0, len(atts))
	for _, a := range atts {
		env = append(env, a.Env+"="+a.Placeholder)
	}
	return env, nil
}

// secretName is the secret a request names, in the namespace it acts in (Namespace): a user
// reaches their own secrets only.
func secretName(r *http.Request) (namespace, name string, err error) {
	p := principal(r)
	name = r.PathValue("secret")
	if err := api.ValidateName("secret", name); err != nil {
		return "", "", err
	}
	return p.Namespace(), name, nil
}

func (d *Daemon) createSecret(w http.ResponseWriter, r *http.Request) error {
	who := principal(r)
	var p api.SecretsPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if err := p.Normalize(); err != nil {
		return err
	}
	s, err := d.secrets.Create(who.Namespace(), p, time.Now())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, s)
}

// listSecrets lists the secrets of the request's namespace, or with all_users=true (an admin
// only) every user's.
func (d *Daemon) listSecrets(w http.ResponseWriter, r *http.Request) error {
	owner, err := listedNamespace(r)
	if err != nil {
		return err
	}
	list, err := d.secrets.List(owner)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.SecretList{Secrets: list})
}

func (d *Daemon) getSecret(w http.ResponseWriter, r *http.Request) error {
	ns, name, err := secretName(r)
	if err != nil {
		return err
	}
	s, err := d.secrets.Get(ns, name)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s)
}

// deleteSecret deletes a secret and detaches it from every sandbox at once: its placeholders
// are worthless from the next request on.
func (d *Daemon) deleteSecret(w http.ResponseWriter, r *http.Request) error {
	ns, name, err := secretName(r)
	if err != nil {
		return err
	}
	if _, err := d.secrets.Delete(ns, name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (d *Daemon) rotateSecret(w http.ResponseWriter, r *http.Request) error {
	ns, name, err := secretName(r)
	if err != nil {
		return err
	}
	var p api.SecretRotate
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	s, err := d.secrets.Rotate(ns, name, p.Value, time.Now())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s)
}

// attachSandboxSecret attaches a secret to a sandbox, running or not: its next processes see
// the placeholder. The secret is the sandbox owner's (secrets.Store.Attach).
func (d *Daemon) attachSandboxSecret(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r) // the key, in the caller's namespace (the guard's)
	if err != nil {
		return err
	}
	var p api.SandboxSecretsPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if err := p.Normalize("secret"); err != nil {
		return err
	}
	sb, err := d.sandboxes.Get(r.Context(), name)
	if err != nil {
		return err
	}
	if err := d.secrets.Attach(sb.ID, name, []api.SecretAttachment{p}); err != nil {
		return err
	}
	return d.writeSandbox(w, http.StatusOK, present(sb))
}

// detachSandboxSecret detaches a secret from a sandbox: its next processes lack the variable,
// and the placeholder is worthless from the next request on.
func (d *Daemon) detachSandboxSecret(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r) // the key, in the caller's namespace (the guard's)
	if err != nil {
		return err
	}
	_, secret, err := secretName(r)
	if err != nil {
		return err
	}
	sb, err := d.sandboxes.Get(r.Context(), name)
	if err != nil {
		return err
	}
	owner, bare := identity.Split(name)
	found, err := d.secrets.Detach(sb.ID, identity.Key(owner, secret))
	if err != nil {
		return err
	}
	if !found {
		return api.Errorf(api.CodeSecretNotFound, "secret %q is not attached to sandbox %q", secret, bare)
	}
	return d.writeSandbox(w, http.StatusOK, present(sb))
}

// withSecrets adds the sandbox's attached secrets (names and variables) to its view.
func (d *Daemon) withSecrets(sb api.Sandbox) (api.Sandbox, error) {
	atts, err := d.secrets.Attachments(sb.ID)
	if err != nil {
		return sb, err
	}
	sb.Secrets = nil
	for _, a := range atts {
		_, secret := identity.Split(a.Secret)
		sb.Secrets = append(sb.Secrets, api.SecretAttachment{Secret: secret, Env: a.Env})
	}
	return sb, nil
}

func (d *Daemon) writeSandbox(w http.ResponseWriter, status int, sb api.Sandbox) error {
	sb, err := d.withSecrets(sb)
	if err != nil {
		return err
	}
	return writeJSON(w, status, d.withExposures(sb))
}

// secretsDeleted detaches every secret of a deleted sandbox.
func (d *Daemon) secretsDeleted(name, id string) {
	if err := d.secrets.DeleteSandbox(id); err != nil {
		d.log.Error("detach the secrets of a deleted sandbox", "sandbox", name, "err", err)
	}
}
