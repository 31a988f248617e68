package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
)

// EgressLog returns one page of a sandbox's egress audit records: those with seq > after, in
// order, at most limit of them (0 or more than api.MaxEgressLogPage for api.MaxEgressLogPage).
// With wait > 0, a daemon that has none yet waits up to wait (at most api.MaxEgressLogWait) for
// one before answering with none.
func (c *Client) EgressLog(ctx context.Context, name string, after uint64, limit int, wait time.Duration) ([]api.EgressRecord, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	if limit > 0 && limit < api.MaxEgressLogPage {
		q.Set("limit", strconv.Itoa(limit))
	}
	if s := int64(wait / time.Second); s > 0 {
		q.Set("wait", strconv.FormatInt(s, 10))
	}
	var l api.EgressRecordList
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(name)+"/egress/log?"+q.Encode(), nil, &l)
	return l.Records, err
}

// followWait is how long each request of FollowEgressLog waits for a record: well under
// api.MaxEgressLogWait, so a daemon that vanished is noticed on the next request.
const followWait = 25 * time.Second

// FollowEgressLog calls fn with every egress audit record of a sandbox with seq > after, in
// order: first the stored ones, then new ones as the daemon stores them, until fn returns an
// error or ctx ends. It asks the daemon again and again, each time after the last record fn got
// (a long poll), so a dropped connection or a daemon restart loses nothing: while the daemon is
// unreachable it retries, backing off from 100ms to 2s, and calls the OnStreamLost option's fn
// once per outage. Seqs may jump: the daemon keeps a bounded number of records per sandbox, so a
// follower that fell far behind finds the oldest ones gone.
//
// Only the first request's failure is returned as it is (an *UnreachableError,
// sandbox_not_found); after that, only an error the daemon answered with ends it
// (sandbox_not_found once the sandbox is deleted). FollowEgressLog returns fn's error, nil if
// that is ErrStopStream, or ctx's error.
func (c *Client) FollowEgressLog(ctx context.Context, name string, after uint64, fn func(api.EgressRecord) error, opts ...StreamOption) error {
	fetch := func(after uint64) ([]api.EgressRecord, error) { return c.EgressLog(ctx, name, after, 0, followWait) }
	return followPolls(ctx, after, fetch, func(r api.EgressRecord) uint64 { return r.Seq }, fn, opts)
}

// followPolls is the long-poll loop of a Follow: fetch asks for the records after a seq,
// seq numbers them, fn gets each once, in order. See FollowEgressLog for the contract.
func followPolls[T any](ctx context.Context, after uint64, fetch func(after uint64) ([]T, error), seq func(T) uint64, fn func(T) error, opts []StreamOption) error {
	var cfg streamConfig
	for _, o := range opts {
		o(&cfg)
	}
	last := after
	connected, lost := false, false
	backoff := streamBackoffMin
	for {
		recs, err := fetch(last)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			var apiErr *api.Error
			if !connected || errors.As(err, &apiErr) && !retryableStatus(apiErr.Code.HTTPStatus()) {
				return err
			}
			if !lost {
				lost = true
				if cfg.onLost != nil {
					cfg.onLost(err)
				}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, streamBackoffMax)
			continue
		}
		connected, lost, backoff = true, false, streamBackoffMin
		for _, rec := range recs {
			if seq(rec) <= last {
				continue // never twice, whatever the daemon sends
			}
			last = seq(rec)
			if err := fn(rec); err != nil {
				if errors.Is(err, ErrStopStream) {
					return nil
				}
				return err
			}
		}
	}
}

func retryableStatus(status int) bool {
	switch status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}
