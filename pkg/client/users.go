package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/hiloop/hiloop/pkg/api"
)

// CreateUser makes a user; the answer holds their trust token, shown once.
func (c *Client) CreateUser(ctx context.Context, p api.UsersPost) (api.UserCreated, error) {
	var u api.UserCreated
	err := c.do(ctx, http.MethodPost, "/v1/users", p, &u)
	return u, err
}

// ListUsers returns every user, the built-in admin first.
func (c *Client) ListUsers(ctx context.Context) ([]api.User, error) {
	var l api.UserList
	err := c.do(ctx, http.MethodGet, "/v1/users", nil, &l)
	return l.Users, err
}

// GetUser returns one user with their certificates and tokens (never a token's value).
func (c *Client) GetUser(ctx context.Context, name string) (api.User, error) {
	var u api.User
	err := c.do(ctx, http.MethodGet, "/v1/users/"+url.PathEscape(name), nil, &u)
	return u, err
}

// RemoveUser removes a user with every credential of theirs; their live connections end.
func (c *Client) RemoveUser(ctx context.Context, name string, opts ...CallOption) error {
	return c.do(ctx, http.MethodDelete, "/v1/users/"+url.PathEscape(name), nil, nil, opts...)
}

// NewTrustToken gives a user a new trust token, good for ttl ("" for the daemon's default,
// 24h), replacing a pending one.
func (c *Client) NewTrustToken(ctx context.Context, name, ttl string) (api.UserCreated, error) {
	path := "/v1/users/" + url.PathEscape(name) + "/trust-token"
	if ttl != "" {
		path += "?ttl=" + url.QueryEscape(ttl)
	}
	var u api.UserCreated
	err := c.do(ctx, http.MethodPost, path, nil, &u)
	return u, err
}

// CreateToken makes an API token for user; the answer holds its value, shown once.
func (c *Client) CreateToken(ctx context.Context, user string, p api.TokensPost) (api.TokenCreated, error) {
	var t api.TokenCreated
	err := c.do(ctx, http.MethodPost, "/v1/users/"+url.PathEscape(user)+"/tokens", p, &t)
	return t, err
}

// ListTokens returns a user's API tokens by name.
func (c *Client) ListTokens(ctx context.Context, user string) ([]api.APIToken, error) {
	var l api.TokenList
	err := c.do(ctx, http.MethodGet, "/v1/users/"+url.PathEscape(user)+"/tokens", nil, &l)
	return l.Tokens, err
}

// RevokeToken deletes a user's API token; the connections that carried it end.
func (c *Client) RevokeToken(ctx context.Context, user, name string, opts ...CallOption) error {
	return c.do(ctx, http.MethodDelete, "/v1/users/"+url.PathEscape(user)+"/tokens/"+url.PathEscape(name), nil, nil, opts...)
}
