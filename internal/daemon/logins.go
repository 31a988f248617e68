package daemon

import (
	"context"
	"crypto/tls"
	"net/http"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
)

// loginProvider is the provider a request's path names, and the user whose login it acts on:
// the namespace the request acts in. A user has logins of their own only.
func loginProvider(r *http.Request) (user string, p api.LoginProvider, err error) {
	who := principal(r)
	p = api.LoginProvider(r.PathValue("provider"))
	if api.LoginKinds(p) == nil {
		return "", "", api.Errorf(api.CodeInvalidArgument, "unknown login provider %q: give claude or codex", p)
	}
	return who.Namespace(), p, nil
}

// putLogin serves PUT /v1/logins/{provider}: the caller's login for the provider, replacing
// any before it. A ChatGPT login is refreshed once at once, which checks it and takes it over
// (the copy it came from must sign in again: its refresh token is spent).
func (d *Daemon) putLogin(w http.ResponseWriter, r *http.Request) error {
	user, p, err := loginProvider(r)
	if err != nil {
		return err
	}
	var body api.LoginPut
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	if err := body.Validate(p); err != nil {
		return err
	}
	l, err := d.logins.Put(user, p, body, time.Now())
	if err != nil {
		return err
	}
	if body.Kind == api.LoginChatGPT {
		// Not cut short by the client going away: once the provider has rotated the refresh
		// token, the new one must be stored, or the login is lost.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
		defer cancel()
		if err := d.logins.RefreshChatGPT(ctx, user, time.Now()); err != nil {
			return err
		}
		if l, err = d.logins.Get(user, p); err != nil {
			return err
		}
	}
	return writeJSON(w, http.StatusOK, l)
}

// listLogins lists the caller's logins, or with all_users=true (an admin only) every user's.
func (d *Daemon) listLogins(w http.ResponseWriter, r *http.Request) error {
	user, err := listedNamespace(r)
	if err != nil {
		return err
	}
	list, err := d.logins.List(user)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.LoginList{Logins: list})
}

func (d *Daemon) getLogin(w http.ResponseWriter, r *http.Request) error {
	user, p, err := loginProvider(r)
	if err != nil {
		return err
	}
	l, err := d.logins.Get(user, p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}

func (d *Daemon) deleteLogin(w http.ResponseWriter, r *http.Request) error {
	user, p, err := loginProvider(r)
	if err != nil {
		return err
	}
	if err := d.logins.Delete(user, p, time.Now()); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// auditRecords serves GET /v1/audit?after=N&limit=M&wait=S, as the egress log does: records
// with seq > N, waiting up to S seconds for one when there is none.
func (d *Daemon) auditRecords(w http.ResponseWriter, r *http.Request) error {
	q, err := parseLogQuery(r)
	if err != nil {
		return err
	}
	recs, err := d.audit.Wait(r.Context(), q.after, q.limit, q.wait)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.AuditRecordList{Records: recs})
}

// auditAdd stores rec in the audit log; a failure to store it is logged, never lost silently.
func (d *Daemon) auditAdd(rec api.AuditRecord) {
	if d.front != nil {
		d.auditFront(rec)
		return
	}
	if err := d.audit.Add(rec); err != nil {
		d.log.Error("audit log", "err", err, "action", rec.Action, "provider", rec.Provider)
	}
}

// upstreamClient is how the daemon itself reaches providers (a login's refresh): TLS verified
// against the host's roots plus --gateway-upstream-ca, as the gateway verifies upstreams.
func (d *Daemon) upstreamClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if d.cfg.GatewayUpstreamCAs != nil {
		t.TLSClientConfig = &tls.Config{RootCAs: d.cfg.GatewayUpstreamCAs}
	}
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}
