package client

import (
	"context"
	"net/http"

	"github.com/hiloop/hiloop/pkg/api"
)

// Trust trades a one-time trust token for a client certificate over the key of csrPEM (made
// by the caller, whose key never leaves it). The call needs no credential but the token; the
// server is trusted as the client's TLS options say (a pinned fingerprint).
func (c *Client) Trust(ctx context.Context, token string, csrPEM []byte) (api.TrustAnswer, error) {
	var out api.TrustAnswer
	// No idempotency key: a trust token works once, and the daemon keeps no receipt of it.
	err := c.do(ctx, http.MethodPost, "/v1/trust", api.TrustPost{Token: token, CSR: string(csrPEM)}, &out, func(r *http.Request) {
		r.Header.Del(api.IdempotencyKeyHeader)
	})
	return out, err
}

// WhoAmI returns the user the client's calls act as, and how it authenticated.
func (c *Client) WhoAmI(ctx context.Context) (api.WhoAmI, error) {
	var out api.WhoAmI
	err := c.do(ctx, http.MethodGet, "/v1/whoami", nil, &out)
	return out, err
}
