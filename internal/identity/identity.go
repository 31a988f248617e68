// Package identity is who a request to the daemon acts as: the user its authentication found
// (the unix socket's local admin, a client certificate, an API token), carried in the
// request's context from the listener's middleware to every handler that checks ownership.
package identity

import "context"

// LocalAdmin is the built-in user a request on the daemon's unix socket acts as: whoever can
// open the socket is root or in its group on the host, and administers the daemon. Everything
// made before the daemon had users belongs to it. No other user may take the name.
const LocalAdmin = "admin"

// Principal is the user a request acts as.
type Principal struct {
	// User is the authenticated user's name.
	User string
	// Admin users see and act on every user's resources.
	Admin bool
	// As is, for an admin acting in another user's namespace (Hiloop-As), that user's name;
	// empty otherwise.
	As string
}

// Local is the unix socket's principal.
func Local() Principal { return Principal{User: LocalAdmin, Admin: true} }

// Namespace is the user whose resources the request names: As when an admin set it, else
// the user's own.
func (p Principal) Namespace() string {
	if p.As != "" {
		return p.As
	}
	return p.User
}

type key struct{}

// With returns ctx carrying p.
func With(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, key{}, p)
}

// From returns the principal ctx carries; ok is false when none does (a request that no
// authentication passed, which must be refused).
func From(ctx context.Context) (p Principal, ok bool) {
	p, ok = ctx.Value(key{}).(Principal)
	return p, ok
}
