package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
)

// PutLogin stores a provider's login, replacing any before it. The value is sent once and
// never returned.
func (c *Client) PutLogin(ctx context.Context, provider api.LoginProvider, p api.LoginPut) (api.Login, error) {
	var l api.Login
	err := c.do(ctx, http.MethodPut, "/v1/logins/"+url.PathEscape(string(provider)), p, &l)
	return l, err
}

// ListLogins returns the caller's provider logins (with AllUsers, every user's), without
// values.
func (c *Client) ListLogins(ctx context.Context, opts ...CallOption) ([]api.Login, error) {
	var l api.LoginList
	err := c.do(ctx, http.MethodGet, "/v1/logins", nil, &l, opts...)
	return l.Logins, err
}

// GetLogin returns one provider's login, without its value.
func (c *Client) GetLogin(ctx context.Context, provider api.LoginProvider) (api.Login, error) {
	var l api.Login
	err := c.do(ctx, http.MethodGet, "/v1/logins/"+url.PathEscape(string(provider)), nil, &l)
	return l, err
}

// DeleteLogin removes a provider's login.
func (c *Client) DeleteLogin(ctx context.Context, provider api.LoginProvider, opts ...CallOption) error {
	return c.do(ctx, http.MethodDelete, "/v1/logins/"+url.PathEscape(string(provider)), nil, nil, opts...)
}

// Audit returns up to limit records of the daemon's audit log with seq > after (limit 0: the
// daemon's page size), waiting up to wait for one when there is none.
func (c *Client) Audit(ctx context.Context, after uint64, limit int, wait time.Duration) ([]api.AuditRecord, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	if limit > 0 && limit < api.MaxEgressLogPage {
		q.Set("limit", strconv.Itoa(limit))
	}
	if s := int64(wait / time.Second); s > 0 {
		q.Set("wait", strconv.FormatInt(s, 10))
	}
	var l api.AuditRecordList
	err := c.do(ctx, http.MethodGet, "/v1/audit?"+q.Encode(), nil, &l)
	return l.Records, err
}

// FollowAudit calls fn with every audit record with seq > after, in order, first the stored
// ones and then new ones, as FollowEgressLog does for a sandbox's egress log.
func (c *Client) FollowAudit(ctx context.Context, after uint64, fn func(api.AuditRecord) error, opts ...StreamOption) error {
	fetch := func(after uint64) ([]api.AuditRecord, error) { return c.Audit(ctx, after, 0, followWait) }
	return followPolls(ctx, after, fetch, func(r api.AuditRecord) uint64 { return r.Seq }, fn, opts)
}
