package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/hiloop/hiloop/pkg/api"
)

// CreateSecret stores a new secret; the daemon never returns its value.
func (c *Client) CreateSecret(ctx context.Context, p api.SecretsPost) (api.Secret, error) {
	var s api.Secret
	err := c.do(ctx, http.MethodPost, "/v1/secrets", p, &s)
	return s, err
}

// ListSecrets returns the caller's secrets (with AllUsers, every user's), without values.
func (c *Client) ListSecrets(ctx context.Context, opts ...CallOption) ([]api.Secret, error) {
	var l api.SecretList
	err := c.do(ctx, http.MethodGet, "/v1/secrets", nil, &l, opts...)
	return l.Secrets, err
}

// GetSecret returns one secret, without its value.
func (c *Client) GetSecret(ctx context.Context, name string) (api.Secret, error) {
	var s api.Secret
	err := c.do(ctx, http.MethodGet, "/v1/secrets/"+url.PathEscape(name), nil, &s)
	return s, err
}

// DeleteSecret deletes a secret and detaches it from every sandbox.
func (c *Client) DeleteSecret(ctx context.Context, name string, opts ...CallOption) error {
	return c.do(ctx, http.MethodDelete, "/v1/secrets/"+url.PathEscape(name), nil, nil, opts...)
}

// RotateSecret gives a secret a new value; its hosts and attachments stay.
func (c *Client) RotateSecret(ctx context.Context, name, value string) (api.Secret, error) {
	var s api.Secret
	err := c.do(ctx, http.MethodPost, "/v1/secrets/"+url.PathEscape(name)+"/rotate", api.SecretRotate{Value: value}, &s)
	return s, err
}

// AttachSecret attaches a secret to a sandbox; its next processes see the placeholder in a.Env.
func (c *Client) AttachSecret(ctx context.Context, sandbox string, a api.SecretAttachment, opts ...CallOption) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(sandbox)+"/secrets", a, &sb, opts...)
	return sb, err
}

// DetachSecret detaches a secret from a sandbox.
func (c *Client) DetachSecret(ctx context.Context, sandbox, secret string, opts ...CallOption) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, http.MethodDelete, "/v1/sandboxes/"+url.PathEscape(sandbox)+"/secrets/"+url.PathEscape(secret), nil, &sb, opts...)
	return sb, err
}
