package daemon

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hiloop/hiloop/internal/cluster/front"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/pkg/api"
)

// How the front routes a call to a node agent. The agent authenticates the front by its client
// certificate (signed by the front's CA, which the agent trusts with --front-ca) and acts as the
// user the front names in api.FrontUserHeader and api.FrontAdminHeader, which the front sets
// from the caller it authenticated (whatever the caller sent in them is dropped); an admin's
// Hiloop-As goes along, and the agent applies it as on a single host. The path is the
// caller's, unchanged: a sandbox's name on its agent is its Sandbox's name, the key of its
// owner's namespace, which the agent makes again from the bare name and the forwarded user.

// proxySandbox routes a call on a sandbox to the node agent holding it.
func (d *Daemon) proxySandbox(w http.ResponseWriter, r *http.Request) error {
	owner, key, err := frontKey(r)
	if err != nil {
		return err
	}
	sb, err := d.front.Get(r.Context(), owner, key)
	if err != nil {
		return err
	}
	a, err := d.front.AgentOf(r.Context(), sb)
	if err != nil {
		return err
	}
	d.proxyTo(w, r, a)
	return nil
}

// frontCreateSession routes a new session to the node agent of the sandbox its body names.
func (d *Daemon) frontCreateSession(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	var p api.SessionsPost
	if err := decodeJSON(body, &p); err != nil {
		return err
	}
	key, err := sandboxKeyOf(r, p.Sandbox)
	if err != nil {
		return err
	}
	sb, err := d.front.Get(r.Context(), principal(r).Namespace(), key)
	if err != nil {
		return err
	}
	a, err := d.front.AgentOf(r.Context(), sb)
	if err != nil {
		return err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	d.proxyTo(w, r, a)
	return nil
}

// proxyFound routes a call on a session or a snapshot, whose name says nothing of its node, to
// the node agent that has it: every ready agent is asked (GET of the session or snapshot, as
// the caller), at once, and the one that answers 200 gets the call. The front remembers
// nothing of it: a replica needs no cache to be right, and the question costs one round trip
// per agent, in parallel, before the call. Found nowhere: the agents' own not-found answer.
func (d *Daemon) proxyFound(w http.ResponseWriter, r *http.Request) error {
	var path string
	var notFound error
	if id := r.PathValue("id"); id != "" {
		path, notFound = "/v1/sessions/"+id, sessionNotFound(id)
	} else {
		name := r.PathValue("snapshot")
		if err := api.ValidateName("snapshot", name); err != nil {
			return err
		}
		path, notFound = "/v1/snapshots/"+name, api.Errorf(api.CodeSnapshotNotFound, "snapshot %q not found", name)
	}
	agents, unready, err := d.front.ReadyAgents(r.Context())
	if err != nil {
		return err
	}
	found := -1
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Go(func() {
			res, err := d.agentCall(r, a, http.MethodGet, path, "")
			if err != nil {
				d.log.Warn("ask a node agent", "node", a.Node, "err", err)
				return
			}
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				mu.Lock()
				found = i
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if found < 0 {
		if len(unready) > 0 {
			return api.Errorf(api.CodeUnavailable, "%s; it may be on a node that is not ready: %s", notFound.Error(), strings.Join(unready, ", "))
		}
		return notFound
	}
	d.proxyTo(w, r, agents[found])
	return nil
}

// proxyTo sends r to a as the caller, and its answer back; an upgraded connection (exec, port
// forward, session stream) is joined to the caller's both ways until either end closes.
func (d *Daemon) proxyTo(w http.ResponseWriter, r *http.Request, a front.Agent) {
	p := principal(r)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(a.URL)
			pr.Out.Host = a.URL.Host
			asFront(pr.Out.Header, p)
		},
		Transport:     a.Transport,
		FlushInterval: -1, // streamed answers (events, builds) pass at once
		ModifyResponse: func(res *http.Response) error {
			res.Header.Del(api.VersionHeader) // the front's own is on the answer
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, d.log, api.Errorf(api.CodeUnavailable, "the node agent of node %s did not answer: %v", a.Node, err))
		},
	}
	rp.ServeHTTP(w, r)
}

// asFront makes h the headers of a call the front makes as p: no credential of the caller's,
// the user and whether they are an admin as the front authenticated them.
func asFront(h http.Header, p identity.Principal) {
	h.Del("Authorization")
	h.Del(api.FrontUserHeader)
	h.Del(api.FrontAdminHeader)
	h.Set(api.FrontUserHeader, p.User)
	h.Set(api.FrontAdminHeader, strconv.FormatBool(p.Admin))
}

// agentCall makes a call of the front's own to a as r's caller (with r's Hiloop-As).
func (d *Daemon) agentCall(r *http.Request, a front.Agent, method, path, query string) (*http.Response, error) {
	u := *a.URL
	u.Path, u.RawQuery = path, query
	req, err := http.NewRequestWithContext(r.Context(), method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if as := r.Header.Get(api.AsHeader); as != "" {
		req.Header.Set(api.AsHeader, as)
	}
	asFront(req.Header, principal(r))
	return (&http.Client{Transport: a.Transport}).Do(req)
}

// fanOut answers a list by asking every ready node agent the same, as the caller, and merging
// their answers; an agent that is not ready or fails leaves its part out, and the answer says
// so in the header api.PartialHeader (the nodes left out).
func fanOut[T any](merge func([]T) T) func(d *Daemon) handlerFunc {
	return func(d *Daemon) handlerFunc {
		return func(w http.ResponseWriter, r *http.Request) error {
			agents, missing, err := d.front.ReadyAgents(r.Context())
			if err != nil {
				return err
			}
			parts := make([]*T, len(agents))
			failed := make([]error, len(agents))
			var wg sync.WaitGroup
			for i, a := range agents {
				wg.Go(func() {
					var v T
					failed[i] = d.agentJSON(r, a, &v)
					if failed[i] == nil {
						parts[i] = &v
					}
				})
			}
			wg.Wait()
			var got []T
			for i, part := range parts {
				if part != nil {
					got = append(got, *part)
					continue
				}
				var apiErr *api.Error
				if errors.As(failed[i], &apiErr) && apiErr.Code != api.CodeUnavailable && apiErr.Code != api.CodeInternal {
					return apiErr // the caller's mistake (a bad query), said by any agent
				}
				d.log.Warn("a node agent left out of a list", "node", agents[i].Node, "route", r.Pattern, "err", failed[i])
				missing = append(missing, agents[i].Node)
			}
			if len(missing) > 0 {
				slices.Sort(missing)
				w.Header().Set(api.PartialHeader, strings.Join(missing, ","))
			}
			return writeJSON(w, http.StatusOK, merge(got))
		}
	}
}

// agentJSON GETs r's path and query from a as r's caller, into v.
func (d *Daemon) agentJSON(r *http.Request, a front.Agent, v any) error {
	res, err := d.agentCall(r, a, http.MethodGet, r.URL.Path, r.URL.RawQuery)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		var eb api.ErrorBody
		if json.Unmarshal(body, &eb) == nil && eb.Error != nil {
			return eb.Error
		}
		return fmt.Errorf("%s answered %s", a.Node, res.Status)
	}
	return json.Unmarshal(body, v)
}

func mergeSessions(parts []api.SessionList) api.SessionList {
	out := api.SessionList{Sessions: []api.Session{}}
	for _, p := range parts {
		out.Sessions = append(out.Sessions, p.Sessions...)
	}
	slices.SortStableFunc(out.Sessions, func(a, b api.Session) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out
}

func mergeSnapshots(parts []api.SnapshotList) api.SnapshotList {
	out := api.SnapshotList{Snapshots: []api.Snapshot{}}
	for _, p := range parts {
		out.Snapshots = append(out.Snapshots, p.Snapshots...)
	}
	slices.SortStableFunc(out.Snapshots, func(a, b api.Snapshot) int {
		return cmp.Or(strings.Compare(a.Owner, b.Owner), strings.Compare(a.Name, b.Name))
	})
	return out
}

func mergeAudit(parts []api.AuditRecordList) api.AuditRecordList {
	out := api.AuditRecordList{Records: []api.AuditRecord{}}
	for _, p := range parts {
		out.Records = append(out.Records, p.Records...)
	}
	slices.SortStableFunc(out.Records, func(a, b api.AuditRecord) int { return a.Time.Compare(b.Time) })
	return out
}

// mergeUsage adds the agents' reports: the totals, and the groups of the same key (a model, a
// day; a sandbox or a session is on one agent only).
func mergeUsage(parts []api.UsageReport) api.UsageReport {
	out := api.UsageReport{BySandbox: []api.UsageGroup{}, BySession: []api.UsageGroup{}, ByModel: []api.UsageGroup{}, ByDay: []api.UsageGroup{}}
	for _, p := range parts {
		if out.From.IsZero() || !p.From.IsZero() && p.From.Before(out.From) {
			out.From = p.From
		}
		addTotals(&out.Total, p.Total)
		out.BySandbox = addGroups(out.BySandbox, p.BySandbox)
		out.BySession = addGroups(out.BySession, p.BySession)
		out.ByModel = addGroups(out.ByModel, p.ByModel)
		out.ByDay = addGroups(out.ByDay, p.ByDay)
	}
	return out
}

func addTotals(t *api.UsageTotals, u api.UsageTotals) {
	t.InputTokens += u.InputTokens
	t.OutputTokens += u.OutputTokens
	t.CacheReadTokens += u.CacheReadTokens
	t.CacheWriteTokens += u.CacheWriteTokens
	t.TotalTokens += u.TotalTokens
	t.Requests += u.Requests
}

func addGroups(into, more []api.UsageGroup) []api.UsageGroup {
	for _, g := range more {
		i := slices.IndexFunc(into, func(h api.UsageGroup) bool {
			return h.Sandbox == g.Sandbox && h.Owner == g.Owner && h.SandboxID == g.SandboxID && h.Session == g.Session && h.Model == g.Model && h.Day == g.Day
		})
		if i < 0 {
			into = append(into, g)
			continue
		}
		addTotals(&into[i].UsageTotals, g.UsageTotals)
	}
	return into
}
