package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/pki"
	"github.com/hiloop/hiloop/internal/users"
	"github.com/hiloop/hiloop/pkg/api"
)

// requireAdmin refuses a caller who is not an admin.
func requireAdmin(r *http.Request) error {
	p := principal(r)
	if !p.Admin {
		return api.Errorf(api.CodeForbidden, "%s %s needs an admin: user %q is not one", r.Method, r.Pattern, p.User)
	}
	return nil
}

// pathUser reads {user} and lets an admin, or that user themself, through: a user sees their
// own record and manages their own API tokens.
func pathUser(r *http.Request, selfToo bool) (string, error) {
	name := r.PathValue("user")
	if err := api.ValidateName("user", name); err != nil {
		return "", err
	}
	p := principal(r)
	if p.Admin || (selfToo && p.User == name) {
		return name, nil
	}
	return "", api.Errorf(api.CodeForbidden, "%s %s needs an admin: user %q is not one", r.Method, r.Pattern, p.User)
}

func (d *Daemon) createUser(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdmin(r); err != nil {
		return err
	}
	var p api.UsersPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	ttl, err := users.ParseTTL("trust_token_ttl", p.TrustTokenTTL)
	if err != nil {
		return err
	}
	if err := d.namespaceEmpty(r.Context(), p.Name); err != nil {
		return err
	}
	created, err := d.users.Add(p.Name, users.AddOptions{Admin: p.Admin, TrustTTL: ttl, Namespace: p.Namespace})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, created)
}

func (d *Daemon) listUsers(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdmin(r); err != nil {
		return err
	}
	list, err := d.users.List()
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.UserList{Users: list})
}

func (d *Daemon) getUser(w http.ResponseWriter, r *http.Request) error {
	name, err := pathUser(r, true)
	if err != nil {
		return err
	}
	u, err := d.users.Get(name)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, u)
}

// deleteUser removes a user and every credential of theirs; their live connections end
// (users.Store.OnRevoke). What they own stays, for an admin to see and delete.
func (d *Daemon) deleteUser(w http.ResponseWriter, r *http.Request) error {
	name, err := pathUser(r, false)
	if err != nil {
		return err
	}
	d.auth.live.spareCaller(w, r, userMatch(name))
	if err := d.users.Remove(name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// newTrustToken gives a user a new trust token (?ttl=, default 24h), replacing a pending one.
func (d *Daemon) newTrustToken(w http.ResponseWriter, r *http.Request) error {
	name, err := pathUser(r, false)
	if err != nil {
		return err
	}
	ttl, err := users.ParseTTL("ttl", r.URL.Query().Get("ttl"))
	if err != nil {
		return err
	}
	created, err := d.users.NewTrustToken(name, ttl)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, created)
}

func (d *Daemon) createToken(w http.ResponseWriter, r *http.Request) error {
	name, err := pathUser(r, true)
	if err != nil {
		return err
	}
	var p api.TokensPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	ttl, err := users.ParseTTL("ttl", p.TTL)
	if err != nil {
		return err
	}
	created, err := d.users.CreateToken(name, p.Name, ttl)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, created)
}

func (d *Daemon) listTokens(w http.ResponseWriter, r *http.Request) error {
	name, err := pathUser(r, true)
	if err != nil {
		return err
	}
	list, err := d.users.Tokens(name)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.TokenList{Tokens: list})
}

// revokeToken deletes an API token; the connections that carried it end
// (users.Store.OnRevokeCredential).
func (d *Daemon) revokeToken(w http.ResponseWriter, r *http.Request) error {
	name, err := pathUser(r, true)
	if err != nil {
		return err
	}
	token := r.PathValue("token")
	if err := api.ValidateName("token", token); err != nil {
		return err
	}
	d.auth.live.spareCaller(w, r, tokenMatch(name, token))
	if err := d.users.RevokeToken(name, token); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// trust trades a trust token for a client certificate over the CSR's key. It is served
// without a credential (authenticator.serveTrust); a bad token is one answer whatever was
// wrong with it.
func (d *Daemon) trust(w http.ResponseWriter, r *http.Request) error {
	var p api.TrustPost
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if p.Token == "" {
		return users.ErrBadTrustToken
	}
	var fingerprint string
	ans, err := d.users.Exchange(p.Token, func(user string) (*x509.Certificate, error) {
		cert, err := d.tls.CA.SignClient([]byte(p.CSR), user, users.CertificateTTL)
		if err != nil {
			return nil, api.Errorf(api.CodeBadRequest, "%v", err)
		}
		fingerprint = pki.Fingerprint(cert.Raw)
		return cert, nil
	})
	if err != nil {
		return err
	}
	d.auditAdd(api.AuditRecord{Action: api.AuditCertificateIssued, User: ans.User, Message: fingerprint})
	return writeJSON(w, http.StatusOK, ans)
}

func (d *Daemon) whoami(w http.ResponseWriter, r *http.Request) error {
	p := principal(r)
	ans := api.WhoAmI{User: p.User, Admin: p.Admin, Via: viaUnix}
	if cred, ok := credentialOf(r); ok {
		ans.Via, ans.Token = cred.via, cred.token
	}
	return writeJSON(w, http.StatusOK, ans)
}

// isAdmin reports whether user is an admin: the local admin, or a user made with --admin. An
// error reading the store counts as no.
func (d *Daemon) isAdmin(user string) bool {
	if user == identity.LocalAdmin {
		return true
	}
	u, err := d.users.Get(user)
	return err == nil && u.Admin
}

// userRemoved takes what a removed user reached by key: their SSH keys go, and their SSH
// sessions and forwards end (their API connections are the authenticator's to close).
func (d *Daemon) userRemoved(user string) {
	if _, err := d.store.DeleteSSHKeysOf(user); err != nil {
		d.log.Error("remove the SSH keys of a removed user", "user", user, "err", err)
	}
	if err := d.sshKeys.reload(); err != nil {
		d.log.Error("reload the SSH keys", "err", err)
	}
	if d.ssh != nil {
		d.ssh.CloseUser(user)
	}
}

// namespaceEmpty refuses to give out a user name whose namespace still holds resources: those
// of a removed user, which a new user of the name would otherwise own. An admin deletes them
// first, acting as the removed user (--as).
func (d *Daemon) namespaceEmpty(ctx context.Context, name string) error {
	if api.ValidateName("user", name) != nil || name == identity.LocalAdmin {
		return nil // the users store says what is wrong with the name
	}
	if d.front != nil {
		return d.frontNamespaceEmpty(ctx, name)
	}
	var held []string
	count := func(what string, n int) {
		if n > 0 {
			held = append(held, fmt.Sprintf("%d %s", n, what))
		}
	}
	sandboxes, err := d.store.ListSandboxes()
	if err != nil {
		return err
	}
	n := 0
	for _, sb := range sandboxes {
		if identity.InNamespace(sb.Name, name) {
			n++
		}
	}
	count("sandbox(es)", n)
	snapshots, err := d.store.ListSnapshots()
	if err != nil {
		return err
	}
	n = 0
	for _, sn := range snapshots {
		if identity.InNamespace(sn.Name, name) {
			n++
		}
	}
	count("snapshot(s)", n)
	secrets, err := d.secrets.List(name)
	if err != nil {
		return err
	}
	count("secret(s)", len(secrets))
	logins, err := d.logins.List(name)
	if err != nil {
		return err
	}
	count("login(s)", len(logins))
	if len(held) == 0 {
		return nil
	}
	return api.Errorf(api.CodeUserExists, "the name %q was a user's who still owns %s: delete them first (e.g. `hiloop --as %s sandbox list`), so that a new user of the name does not get them", name, strings.Join(held, ", "), name)
}
