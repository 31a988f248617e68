package daemon

import (
	"errors"
	"net/http"
	"time"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/internal/usage"
	"github.com/hiloop/hiloop/pkg/api"
)

// Model usage and budgets as the API shows them: usage is kept by sandbox id (internal/usage);
// the API names sandboxes, so these handlers translate. They read the store's records, not the
// sandbox manager, so that a sandbox busy in a transition still answers.

// getUsage serves GET /v1/usage?sandbox=NAME&session=ID&since=RFC3339: the model usage of the
// caller's sandboxes (every user's with all_users), or one sandbox's, or one session's, from
// since on, by sandbox, session, model and day.
func (d *Daemon) getUsage(w http.ResponseWriter, r *http.Request) error {
	q, err := d.usageQuery(r)
	if err != nil {
		return err
	}
	recs, err := d.store.ListSandboxes()
	if err != nil {
		return err
	}
	names := map[string]string{}
	for _, rec := range recs {
		names[rec.ID] = rec.Name
	}
	if all, _ := allUsers(r); !all {
		// A deleted sandbox's usage stays, by id, with no record to say whose it was: the
		// local admin's, who administers the host, sees it.
		show, local := visible(r), principal(r).Namespace() == identity.LocalAdmin
		q.Sandboxes = func(id string) bool {
			key, ok := names[id]
			return (ok && show(key)) || (!ok && local)
		}
	}
	// The records of requests that have ended are queued for the writer; wait for them, so
	// that a report asked for after a turn counts all of it.
	if err := d.usage.Flush(); err != nil {
		return err
	}
	rep, err := d.usage.Query(q)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, usageReport(rep, names))
}

// usageQuery reads the query of GET /v1/usage, resolving the sandbox's name (in the caller's
// namespace) and the session (of that namespace) to ids.
func (d *Daemon) usageQuery(r *http.Request) (usage.Query, error) {
	var q usage.Query
	v := r.URL.Query()
	if since := v.Get("since"); since != "" {
		t, err := time.Parse(time.RFC3339Nano, since)
		if err != nil {
			return q, api.Errorf(api.CodeInvalidArgument, "invalid since %q: use an RFC 3339 time, e.g. 2025-06-30T09:00:00Z", since)
		}
		q.Since = t
	}
	sandbox := v.Get("sandbox")
	if sandbox != "" {
		key, err := sandboxKeyOf(r, sandbox)
		if err != nil {
			return q, err
		}
		rec, err := d.sandboxRecord(key)
		if err != nil {
			return q, err
		}
		q.SandboxID, sandbox = rec.ID, key
	}
	if id := v.Get("session"); id != "" {
		rec, err := d.sessionRecord(id)
		if err != nil {
			return q, err
		}
		if !identity.InNamespace(rec.Sandbox, principal(r).Namespace()) {
			return q, sessionNotFound(id)
		}
		if sandbox != "" && rec.Sandbox != sandbox {
			return q, api.Errorf(api.CodeInvalidArgument, "session %s is in sandbox %q, not %q", id, bare(rec.Sandbox), bare(sandbox))
		}
		q.SandboxID, q.SessionID = rec.SandboxID, rec.ID
	}
	return q, nil
}

// putSandboxBudget serves PUT /v1/sandboxes/{name}/budget: the sandbox's new model token budget
// (0 removes it), answered with its usage and budget. A budget at or below what is spent
// refuses the next request.
func (d *Daemon) putSandboxBudget(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r)
	if err != nil {
		return err
	}
	return d.putBudget(w, r, sandboxNotFound(name), func() (string, string, error) {
		rec, err := d.sandboxRecord(name)
		return rec.ID, "", err
	})
}

// putSessionBudget serves PUT /v1/sessions/{id}/budget, as putSandboxBudget does for a session.
func (d *Daemon) putSessionBudget(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := api.ValidateSessionID(id); err != nil {
		return err
	}
	return d.putBudget(w, r, sessionNotFound(id), func() (string, string, error) {
		rec, err := d.sessionRecord(id)
		return rec.SandboxID, rec.ID, err
	})
}

// putBudget sets the budget a PUT's body names on the account account finds: a sandbox's
// (session "") or a session's; gone is the answer when it was deleted meanwhile.
func (d *Daemon) putBudget(w http.ResponseWriter, r *http.Request, gone error, account func() (sandboxID, sessionID string, err error)) error {
	var p api.BudgetPut
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	sandboxID, sessionID, err := account()
	if err != nil {
		return err
	}
	if err := d.setBudget(sandboxID, sessionID, *p.Tokens); err != nil {
		if errors.Is(err, usage.ErrGone) {
			return gone
		}
		return err
	}
	u, err := d.modelUsage(sandboxID, sessionID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, u)
}

// setBudget sets a sandbox's budget (session "") or a session's.
func (d *Daemon) setBudget(sandboxID, sessionID string, tokens int64) error {
	if sessionID == "" {
		return d.usage.SetSandboxBudget(sandboxID, tokens)
	}
	return d.usage.SetSessionBudget(sandboxID, sessionID, tokens)
}

// setCreateBudget stores the budget a create request named for a sandbox (session "") or a
// session that was just made; undo removes what was made when it cannot be stored, so that a
// create never leaves something without the budget it asked for.
func (d *Daemon) setCreateBudget(sandboxID, sessionID string, tokens int64, undo func() error) error {
	if tokens == 0 {
		return nil
	}
	err := d.setBudget(sandboxID, sessionID, tokens)
	if err != nil {
		if uerr := undo(); uerr != nil {
			d.log.Error("undo a create whose budget could not be stored", "sandbox_id", sandboxID, "session", sessionID, "err", uerr)
		}
	}
	return err
}

// withSandboxUsage adds a sandbox's model usage and budget to its view.
func (d *Daemon) withSandboxUsage(sb api.Sandbox) (api.Sandbox, error) {
	u, err := d.modelUsage(sb.ID, "")
	sb.ModelUsage = u
	return sb, err
}

// withSessionUsage adds a session's model usage and budget to its view; one deleted meanwhile
// (a list racing a delete) is shown without.
func (d *Daemon) withSessionUsage(se api.Session) (api.Session, error) {
	rec, err := d.store.GetSession(se.ID)
	if errors.Is(err, store.ErrNotFound) {
		return se, nil
	}
	if err != nil {
		return se, err
	}
	se.ModelUsage, err = d.modelUsage(rec.SandboxID, rec.ID)
	return se, err
}

// modelUsage is the usage and budget of a sandbox (session "") or a session, as the API shows
// them; it counts requests whose records are not written yet.
func (d *Daemon) modelUsage(sandboxID, sessionID string) (*api.ModelUsage, error) {
	var t usage.Totals
	var budget int64
	var err error
	if sessionID == "" {
		t, budget, err = d.usage.SandboxUsage(sandboxID)
	} else {
		t, budget, err = d.usage.SessionUsage(sandboxID, sessionID)
	}
	if err != nil {
		return nil, err
	}
	u := &api.ModelUsage{UsageTotals: usageTotals(t), BudgetTokens: budget}
	if budget > 0 {
		left := max(budget-t.Total(), 0)
		u.RemainingTokens = &left
	}
	return u, nil
}

// sandboxRecord is the stored record of the sandbox with key.
func (d *Daemon) sandboxRecord(key string) (store.Sandbox, error) {
	rec, err := d.store.GetSandbox(key)
	if errors.Is(err, store.ErrNotFound) {
		return rec, sandboxNotFound(key)
	}
	return rec, err
}

// sessionRecord is the stored record of the session with id.
func (d *Daemon) sessionRecord(id string) (store.Session, error) {
	if err := api.ValidateSessionID(id); err != nil {
		return store.Session{}, err
	}
	rec, err := d.store.GetSession(id)
	if errors.Is(err, store.ErrNotFound) {
		return rec, sessionNotFound(id)
	}
	return rec, err
}

func sandboxNotFound(key string) error {
	return api.Errorf(api.CodeSandboxNotFound, "sandbox %q not found", bare(key))
}

func sessionNotFound(id string) error {
	return api.Errorf(api.CodeSessionNotFound, "session %s not found: `hiloop session list` shows the sessions", id)
}

func usageTotals(t usage.Totals) api.UsageTotals {
	return api.UsageTotals{InputTokens: t.Input, OutputTokens: t.Output, CacheReadTokens: t.CacheRead,
		CacheWriteTokens: t.CacheWrite, TotalTokens: t.Total(), Requests: t.Requests}
}

// usageReport is rep as the API shows it, sandboxes named by names (id → key) with their
// owners. A sandbox deleted since the query keeps its id alone.
func usageReport(rep usage.Report, names map[string]string) api.UsageReport {
	groups := func(gs []usage.Group) []api.UsageGroup {
		out := make([]api.UsageGroup, 0, len(gs))
		for _, g := range gs {
			ug := api.UsageGroup{SandboxID: g.SandboxID, Session: g.SessionID, Model: g.Model, Day: g.Day,
				UsageTotals: usageTotals(g.Totals)}
			if key, ok := names[g.SandboxID]; ok && g.SandboxID != "" {
				ug.Owner, ug.Sandbox = identity.Split(key)
			}
			out = append(out, ug)
		}
		return out
	}
	return api.UsageReport{From: rep.From, Total: usageTotals(rep.Total), BySandbox: groups(rep.BySandbox),
		BySession: groups(rep.BySession), ByModel: groups(rep.ByModel), ByDay: groups(rep.ByDay)}
}
