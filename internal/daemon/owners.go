package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/hiloop/hiloop/internal/handoff"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// Who owns what, at the API edge. Every user has a namespace of their own (internal/identity):
// the daemon keeps a sandbox or a snapshot under its key, and the API turns every name a
// request gives into a key of the caller's namespace before any handler sees it, and every key
// an answer holds back into a bare name and its owner. Another user's resource is therefore
// never reached by name, and a session (named by a global id) is checked against its
// sandbox's owner: both answer "not found", the same as a resource that does not exist.

// scope is a route's owner decision: how the route finds the resources it reaches, and so
// what the daemon checks before its handler runs. Every route declares one (routes.go); a
// route without one serves admins only, and the route table's test fails for it.
type scope string

const (
	// scopePublic routes reach nothing that belongs to anyone: the version, whoami, trust.
	scopePublic scope = "public"
	// scopeList routes list, or make, resources of the caller's namespace; all_users=true
	// (admins only) lists every namespace's.
	scopeList scope = "list"
	// scopeSandbox routes name a sandbox by {name}, which becomes its key in the caller's
	// namespace; one there is none of is sandbox_not_found.
	scopeSandbox scope = "sandbox"
	// scopeSnapshot routes name a snapshot by {snapshot}, as scopeSandbox does a sandbox.
	scopeSnapshot scope = "snapshot"
	// scopeSession routes name a session by {id}; one whose sandbox is another namespace's
	// is session_not_found.
	scopeSession scope = "session"
	// scopeSecret, scopeSSHKey and scopeLogin routes name the caller's secrets, SSH keys and
	// provider logins; their handlers look them up in the caller's namespace.
	scopeSecret scope = "secret"
	scopeSSHKey scope = "ssh-key"
	scopeLogin  scope = "login"
	// scopeImage routes read the host-wide image catalog, which every user uses.
	scopeImage scope = "image"
	// scopeImageMutation routes change the catalog (build, import, pull, delete): admins only.
	scopeImageMutation scope = "image-mutation"
	// scopeUser routes administer the daemon (users, tokens, the audit log): admins only.
	scopeUser scope = "user"
	// scopeAccount routes name a user's account ({user}): a user reads their own record and
	// manages their own API tokens, an admin anyone's; their handlers decide.
	scopeAccount scope = "account"
)

// guard returns rt's handler behind its scope's checks; the handler then finds, in r's path
// values, keys of the caller's namespace instead of the names the request gave.
func (d *Daemon) guard(rt route) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		r, err := d.check(rt.scope, r)
		if err != nil {
			// Refused before its handler could take them: what a local client handed off
			// with the request (an exec's stdio, a forwarded connection) is closed now, not
			// held until the client hangs up.
			c, _ := r.Context().Value(connKey{}).(net.Conn)
			closeFiles(handoff.Take(c))
			return err
		}
		return rt.handle(w, r)
	}
}

// check makes scope's checks of r, returning r as its handler gets it.
func (d *Daemon) check(sc scope, r *http.Request) (*http.Request, error) {
	switch sc {
	case scopePublic, scopeImage, scopeSecret, scopeSSHKey, scopeLogin, scopeAccount:
		return r, nil
	case scopeList:
		_, err := allUsers(r)
		return r, err
	case scopeSandbox:
		key, err := d.ownSandbox(r)
		if err != nil {
			return r, err
		}
		r = r.WithContext(context.WithValue(r.Context(), qualified{}, true))
		r.SetPathValue("name", key)
		return r, nil
	case scopeSnapshot:
		key, err := d.ownSnapshot(r)
		if err == nil {
			r.SetPathValue("snapshot", key)
		}
		return r, err
	case scopeSession:
		return r, d.ownSession(r)
	case scopeImageMutation:
		if !principal(r).Admin {
			return r, api.Errorf(api.CodeForbidden, "%s images needs an admin: the image catalog is the host's, shared by every user", imageVerb(r))
		}
		return r, nil
	}
	// scopeUser, and a route that declares none.
	if !principal(r).Admin {
		return r, api.Errorf(api.CodeForbidden, "%s %s needs an admin: user %q is not one", r.Method, r.Pattern, principal(r).User)
	}
	return r, nil
}

// qualified marks, in a request's context, that its guard turned {name} into a sandbox's key.
type qualified struct{}

// imageVerb names what an image mutation does, for its refusal.
func imageVerb(r *http.Request) string {
	switch {
	case r.Method == http.MethodDelete:
		return "deleting"
	case strings.HasSuffix(r.Pattern, "/import"):
		return "importing"
	case strings.HasSuffix(r.Pattern, "/pull"):
		return "pulling"
	}
	return "building"
}

// principal is the user r acts as; the mux refuses a request without one (requirePrincipal),
// so every handler has one.
func principal(r *http.Request) identity.Principal {
	p, _ := identity.From(r.Context())
	return p
}

// qualify is the key of name in the caller's namespace, after checking that name is a valid
// name of kind: a name never holds a '.', so no request can spell another namespace's key.
func qualify(r *http.Request, kind, name string) (string, error) {
	if err := api.ValidateName(kind, name); err != nil {
		return "", err
	}
	return identity.Key(principal(r).Namespace(), name), nil
}

// ownSandbox is the key of the sandbox r's {name} gives, which must exist.
func (d *Daemon) ownSandbox(r *http.Request) (string, error) {
	key, err := qualify(r, "sandbox", r.PathValue("name"))
	if err != nil {
		return "", err
	}
	if _, err := d.store.GetSandbox(key); errors.Is(err, store.ErrNotFound) {
		return "", sandboxNotFound(key)
	} else if err != nil {
		return "", err
	}
	return key, nil
}

// ownSnapshot is the key of the snapshot r's {snapshot} gives, which must exist.
func (d *Daemon) ownSnapshot(r *http.Request) (string, error) {
	key, err := qualify(r, "snapshot", r.PathValue("snapshot"))
	if err != nil {
		return "", err
	}
	if _, err := d.store.GetSnapshot(key); errors.Is(err, store.ErrNotFound) {
		return "", snapshotNotFound(key)
	} else if err != nil {
		return "", err
	}
	return key, nil
}

// ownSession checks that the session r's {id} names is in the caller's namespace: its
// sandbox's owner's.
func (d *Daemon) ownSession(r *http.Request) error {
	rec, err := d.sessionRecord(r.PathValue("id"))
	if err != nil {
		return err
	}
	if !identity.InNamespace(rec.Sandbox, principal(r).Namespace()) {
		return sessionNotFound(rec.ID)
	}
	return nil
}

// allUsers reads a list's all_users=true, which only an admin may ask.
func allUsers(r *http.Request) (bool, error) {
	all, err := boolQuery(r, "all_users")
	if err != nil {
		return false, err
	}
	if all && !principal(r).Admin {
		return false, api.Errorf(api.CodeForbidden, "all_users needs an admin: a user lists their own")
	}
	return all, nil
}

// listedNamespace is the namespace a list shows: the caller's, or "" (every user's) with
// all_users, which only an admin may ask for.
func listedNamespace(r *http.Request) (string, error) {
	all, err := allUsers(r)
	if err != nil || all {
		return "", err
	}
	return principal(r).Namespace(), nil
}

// visible is the filter of a list route's answer: every key with all_users, else the keys of
// the caller's namespace. The list's guard has checked all_users.
func visible(r *http.Request) func(key string) bool {
	if all, _ := allUsers(r); all {
		return func(string) bool { return true }
	}
	ns := principal(r).Namespace()
	return func(key string) bool { return identity.InNamespace(key, ns) }
}

// sandboxKeyOf is the key of a sandbox a request's body or query names, in the caller's
// namespace.
func sandboxKeyOf(r *http.Request, name string) (string, error) {
	return qualify(r, "sandbox", name)
}

// present is sb as its owner sees it: the bare name, and the owner.
func present(sb api.Sandbox) api.Sandbox {
	sb.Owner, sb.Name = identity.Split(sb.Name)
	return sb
}

// presentSnapshot is sn as its owner sees it.
func presentSnapshot(sn api.Snapshot) api.Snapshot {
	sn.Owner, sn.Name = identity.Split(sn.Name)
	_, sn.Sandbox = identity.Split(sn.Sandbox)
	return sn
}

// presentSession is se as its owner sees it.
func presentSession(se api.Session) api.Session {
	se.Owner, se.Sandbox = identity.Split(se.Sandbox)
	return se
}

// bare is the name a key shows its owner.
func bare(key string) string {
	_, name := identity.Split(key)
	return name
}

// ownedName is key as an admin reads it among every user's: the bare name, and whose it is
// when it is not the local admin's.
func ownedName(key string) string {
	owner, name := identity.Split(key)
	if owner == identity.LocalAdmin {
		return name
	}
	return fmt.Sprintf("%s (user %s)", name, owner)
}

func snapshotNotFound(key string) error {
	return api.Errorf(api.CodeSnapshotNotFound, "snapshot %q not found", bare(key))
}
