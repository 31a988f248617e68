package store

import "context"

// Call identifies one API call made with an idempotency key: a digest of the key and of the
// request (internal/daemon's idempotency makes it). A record that such a call makes or changes
// carries it, so that a retry of the call whose receipt a crash lost (the effect was stored, the
// receipt not yet) finds the call done and answers from the record instead of running it again.
// The empty Call is a call without a key, and matches nothing.
type Call string

type callKey struct{}

// WithCall returns ctx carrying call c.
func WithCall(ctx context.Context, c Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// CallOf returns the call ctx carries; "" when the request had no idempotency key.
func CallOf(ctx context.Context) Call {
	c, _ := ctx.Value(callKey{}).(Call)
	return c
}

// Made says whether a record carrying the call made is the effect of call c (not "").
func (c Call) Made(made Call) bool { return c != "" && c == made }
