// Package identity is who a request to the daemon acts as: the user its authentication found
// (the unix socket's local admin, a client certificate, an API token), carried in the
// request's context from the listener's middleware to every handler that checks ownership.
package identity

import (
	"context"
	"strings"
)

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

// The daemon keeps one namespace per user: a user's sandbox, snapshot, secret, SSH key and
// login names are theirs alone, and no collision tells one user what another has. Inside the
// daemon a resource is stored under its key: the bare name in the local admin's namespace
// (so everything made before users existed is the admin's, unchanged), and USER.NAME in any
// other user's. Names never hold a '.', so a key is never ambiguous, and a request can only
// reach keys of its own namespace: the API qualifies every name it is given (Key), and an
// answer shows the bare name with its owner (Split).

// Key is the key of name in namespace.
func Key(namespace, name string) string {
	if namespace == LocalAdmin || namespace == "" {
		return name
	}
	return namespace + "." + name
}

// Split returns the namespace and the bare name of key.
func Split(key string) (namespace, name string) {
	if ns, n, ok := strings.Cut(key, "."); ok {
		return ns, n
	}
	return LocalAdmin, key
}

// InNamespace reports whether key belongs to namespace.
func InNamespace(key, namespace string) bool {
	ns, _ := Split(key)
	return ns == namespace
}
