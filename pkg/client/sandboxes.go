package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/hiloop/hiloop/pkg/api"
)

// Version returns the daemon's version and capabilities.
func (c *Client) Version(ctx context.Context) (api.VersionInfo, error) {
	var v api.VersionInfo
	err := c.do(ctx, http.MethodGet, "/v1/version", nil, &v)
	return v, err
}

// CreateSandbox creates a sandbox and (unless p.NoStart) starts it.
func (c *Client) CreateSandbox(ctx context.Context, p api.SandboxesPost, opts ...CallOption) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, http.MethodPost, "/v1/sandboxes", p, &sb, opts...)
	return sb, err
}

// GetSandbox returns one sandbox.
func (c *Client) GetSandbox(ctx context.Context, name string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(name), nil, &sb)
	return sb, err
}

// ListSandboxes returns the caller's sandboxes (every user's with AllUsers).
func (c *Client) ListSandboxes(ctx context.Context, opts ...CallOption) ([]api.Sandbox, error) {
	var l api.SandboxList
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes", nil, &l, opts...)
	return l.Sandboxes, err
}

// SetSandboxEgress replaces a sandbox's egress policy with p; a running sandbox's new
// connections follow it at once. Putting the same policy again changes nothing.
func (c *Client) SetSandboxEgress(ctx context.Context, name string, p api.Egress, opts ...CallOption) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, http.MethodPut, "/v1/sandboxes/"+url.PathEscape(name)+"/egress", api.EgressPut{Egress: p}, &sb, opts...)
	return sb, err
}

// StartSandbox starts a sandbox; starting a running one is a no-op.
func (c *Client) StartSandbox(ctx context.Context, name string, opts ...CallOption) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(name)+"/start", nil, &sb, opts...)
	return sb, err
}

// StopSandbox stops a sandbox; stopping a stopped one is a no-op.
func (c *Client) StopSandbox(ctx context.Context, name string, opts ...CallOption) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(name)+"/stop", nil, &sb, opts...)
	return sb, err
}

// DeleteSandbox stops and deletes a sandbox with its workspace; its snapshots stay unless
// withSnapshots.
func (c *Client) DeleteSandbox(ctx context.Context, name string, withSnapshots bool, opts ...CallOption) error {
	path := "/v1/sandboxes/" + url.PathEscape(name)
	if withSnapshots {
		path += "?with_snapshots=true"
	}
	return c.do(ctx, http.MethodDelete, path, nil, nil, opts...)
}

// GrowSandbox grows a sandbox's workspace to sizeGiB, online if it runs.
func (c *Client) GrowSandbox(ctx context.Context, name string, sizeGiB int, opts ...CallOption) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(name)+"/grow", api.GrowPost{WorkspaceGiB: sizeGiB}, &sb, opts...)
	return sb, err
}

// RestoreSandbox rolls a stopped sandbox's workspace back to a snapshot.
func (c *Client) RestoreSandbox(ctx context.Context, name, snapshot string, opts ...CallOption) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(name)+"/restore", api.RestorePost{Snapshot: snapshot}, &sb, opts...)
	return sb, err
}

// CreateSnapshot seals a snapshot of a sandbox's workspace; it returns once it is durable.
func (c *Client) CreateSnapshot(ctx context.Context, sandbox string, p api.SnapshotsPost, opts ...CallOption) (api.Snapshot, error) {
	var sn api.Snapshot
	err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(sandbox)+"/snapshots", p, &sn, opts...)
	return sn, err
}

// ListSnapshots returns the caller's snapshots (every user's with AllUsers), or the ones of
// sandbox if it is not empty.
func (c *Client) ListSnapshots(ctx context.Context, sandbox string, opts ...CallOption) ([]api.Snapshot, error) {
	path := "/v1/snapshots"
	if sandbox != "" {
		path = "/v1/sandboxes/" + url.PathEscape(sandbox) + "/snapshots"
	}
	var l api.SnapshotList
	err := c.do(ctx, http.MethodGet, path, nil, &l, opts...)
	return l.Snapshots, err
}

// GetSnapshot returns one snapshot.
func (c *Client) GetSnapshot(ctx context.Context, name string) (api.Snapshot, error) {
	var sn api.Snapshot
	err := c.do(ctx, http.MethodGet, "/v1/snapshots/"+url.PathEscape(name), nil, &sn)
	return sn, err
}

// DeleteSnapshot deletes a snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, name string, opts ...CallOption) error {
	return c.do(ctx, http.MethodDelete, "/v1/snapshots/"+url.PathEscape(name), nil, nil, opts...)
}

// SSHInfo returns how to reach a sandbox over the SSH endpoint (unsupported_capability while
// the endpoint is off).
func (c *Client) SSHInfo(ctx context.Context, name string) (api.SSHInfo, error) {
	var info api.SSHInfo
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(name)+"/ssh", nil, &info)
	return info, err
}

// ListSSHKeys returns the caller's public keys allowed to log in over SSH (with AllUsers,
// every user's).
func (c *Client) ListSSHKeys(ctx context.Context, opts ...CallOption) ([]api.SSHKey, error) {
	var l api.SSHKeyList
	err := c.do(ctx, http.MethodGet, "/v1/ssh-keys", nil, &l, opts...)
	return l.Keys, err
}

// AddSSHKey registers a public key for SSH logins.
func (c *Client) AddSSHKey(ctx context.Context, p api.SSHKeysPost, opts ...CallOption) (api.SSHKey, error) {
	var k api.SSHKey
	err := c.do(ctx, http.MethodPost, "/v1/ssh-keys", p, &k, opts...)
	return k, err
}

// RemoveSSHKey removes a registered public key.
func (c *Client) RemoveSSHKey(ctx context.Context, name string, opts ...CallOption) error {
	return c.do(ctx, http.MethodDelete, "/v1/ssh-keys/"+url.PathEscape(name), nil, nil, opts...)
}

// ExposePort has the daemon listen on the host for a port of the sandbox (pkg/api's Exposure);
// asking again for the same exposure returns it.
func (c *Client) ExposePort(ctx context.Context, name string, p api.ExposurePost, opts ...CallOption) (api.Exposure, error) {
	var e api.Exposure
	err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(name)+"/exposures", p, &e, opts...)
	return e, err
}

// Exposures lists the exposed ports of a sandbox.
func (c *Client) Exposures(ctx context.Context, name string) ([]api.Exposure, error) {
	var l api.ExposureList
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(name)+"/exposures", nil, &l)
	return l.Exposures, err
}

// UnexposePort removes the exposure of a sandbox's port.
func (c *Client) UnexposePort(ctx context.Context, name string, port int, opts ...CallOption) error {
	return c.do(ctx, http.MethodDelete, "/v1/sandboxes/"+url.PathEscape(name)+"/exposures/"+strconv.Itoa(port), nil, nil, opts...)
}
