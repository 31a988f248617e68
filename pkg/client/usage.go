package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
)

// Usage returns the model usage through the model route, in total and by sandbox, session,
// model and day: of the caller's sandboxes (every user's with AllUsers), or of the sandbox
// named (when not ""), or of one session (when not ""), from since on (zero: all of it).
func (c *Client) Usage(ctx context.Context, sandbox, session string, since time.Time, opts ...CallOption) (api.UsageReport, error) {
	q := url.Values{}
	if sandbox != "" {
		q.Set("sandbox", sandbox)
	}
	if session != "" {
		q.Set("session", session)
	}
	if !since.IsZero() {
		q.Set("since", since.UTC().Format(time.RFC3339Nano))
	}
	path := "/v1/usage"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var rep api.UsageReport
	err := c.do(ctx, http.MethodGet, path, nil, &rep, opts...)
	return rep, err
}

// SetSandboxBudget makes tokens the sandbox's model token budget (0 removes it) and returns the
// sandbox's usage and budget. Its harnesses' next requests are checked against it.
func (c *Client) SetSandboxBudget(ctx context.Context, name string, tokens int64, opts ...CallOption) (api.ModelUsage, error) {
	var u api.ModelUsage
	err := c.do(ctx, http.MethodPut, "/v1/sandboxes/"+url.PathEscape(name)+"/budget", api.BudgetPut{Tokens: &tokens}, &u, opts...)
	return u, err
}

// SetSessionBudget makes tokens the session's model token budget (0 removes it) and returns the
// session's usage and budget.
func (c *Client) SetSessionBudget(ctx context.Context, id string, tokens int64, opts ...CallOption) (api.ModelUsage, error) {
	var u api.ModelUsage
	err := c.do(ctx, http.MethodPut, sessionPath(id)+"/budget", api.BudgetPut{Tokens: &tokens}, &u, opts...)
	return u, err
}
