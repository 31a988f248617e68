package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/hiloop/hiloop/pkg/api"
)

// ListImages returns the built images and the definitions the daemon can build.
func (c *Client) ListImages(ctx context.Context) (api.ImageList, error) {
	var l api.ImageList
	err := c.do(ctx, http.MethodGet, "/v1/images", nil, &l)
	return l, err
}

// GetImage returns one built image, with how it was made.
func (c *Client) GetImage(ctx context.Context, name string) (api.Image, error) {
	var img api.Image
	err := c.do(ctx, http.MethodGet, "/v1/images/"+url.PathEscape(name), nil, &img)
	return img, err
}

// DeleteImage deletes a built image; image_in_use while a sandbox uses it.
func (c *Client) DeleteImage(ctx context.Context, name string, opts ...CallOption) error {
	return c.do(ctx, http.MethodDelete, "/v1/images/"+url.PathEscape(name), nil, nil, opts...)
}

// BuildEvents receives a build's stream: stages (where the build is) and progress lines (detail).
type BuildEvents struct {
	Stage    func(line string)
	Progress func(line string)
	// Warning receives what the daemon warns of (api.ImageBuildEvent.Warning); nil: Progress.
	Warning func(line string)
}

// BuildImage builds an image from its definition, or derives one when p.From is set, calling
// progress with each line of build output (stages included).
func (c *Client) BuildImage(ctx context.Context, name string, p api.ImageBuildPost, progress func(string)) (api.Image, error) {
	return c.BuildImageEvents(ctx, name, p, BuildEvents{Stage: progress, Progress: progress})
}

// BuildImageEvents is BuildImage with stages and progress lines told apart.
func (c *Client) BuildImageEvents(ctx context.Context, name string, p api.ImageBuildPost, ev BuildEvents) (api.Image, error) {
	resp, err := c.send(ctx, http.MethodPost, "/v1/images/"+url.PathEscape(name)+"/build", p)
	if err != nil {
		return api.Image{}, err
	}
	return readBuildStream(resp, name, ev)
}

// PullImage makes image name from a registry image; p.Auth, if set, is the registry login.
func (c *Client) PullImage(ctx context.Context, name string, p api.ImagePullPost, ev BuildEvents) (api.Image, error) {
	// No idempotency key: the daemon keeps no receipt of a body that may hold a login.
	resp, err := c.send(ctx, http.MethodPost, "/v1/images/"+url.PathEscape(name)+"/pull", p, func(r *http.Request) {
		r.Header.Del(api.IdempotencyKeyHeader)
	})
	if err != nil {
		return api.Image{}, err
	}
	return readBuildStream(resp, name, ev)
}

// ImportImage makes image name from a docker save or OCI layout archive of size bytes that
// archive reads, streamed to the daemon (not retried: the reader is consumed).
func (c *Client) ImportImage(ctx context.Context, name string, archive io.Reader, size int64, force bool, ev BuildEvents) (api.Image, error) {
	u := c.baseURL + "/v1/images/" + url.PathEscape(name) + "/import"
	if force {
		u += "?force=true"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, io.NopCloser(archive))
	if err != nil {
		return api.Image{}, err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/x-tar")
	req.Header.Set("Content-Length", strconv.FormatInt(size, 10))
	c.authorize(req.Header)
	resp, err := c.http.HTTPClient.Do(req)
	if err != nil {
		return api.Image{}, c.transportError(err)
	}
	if v := resp.Header.Get(api.VersionHeader); v != "" {
		c.daemonVersion.Store(v)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return api.Image{}, decodeError(resp)
	}
	return readBuildStream(resp, name, ev)
}

// readBuildStream reads an image route's newline-delimited ImageBuildEvent stream to its end.
func readBuildStream(resp *http.Response, name string, ev BuildEvents) (api.Image, error) {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), api.MaxBodyBytes)
	for sc.Scan() {
		var e api.ImageBuildEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return api.Image{}, fmt.Errorf("decode build progress: %w", err)
		}
		switch {
		case e.Error != nil:
			return api.Image{}, e.Error
		case e.Image != nil:
			return *e.Image, nil
		case e.Stage != "" && ev.Stage != nil:
			ev.Stage(e.Stage)
		case e.Progress != "" && ev.Progress != nil:
			ev.Progress(e.Progress)
		case e.Warning != "" && ev.Warning != nil:
			ev.Warning(e.Warning)
		case e.Warning != "" && ev.Progress != nil:
			ev.Progress("warning: " + e.Warning)
		}
	}
	if err := sc.Err(); err != nil {
		return api.Image{}, fmt.Errorf("image build stream: %w", err)
	}
	return api.Image{}, fmt.Errorf("image build of %q ended without a result: see the sandboxd log", name)
}
