package sandbox

import (
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/pkg/api"
)

// The manager keeps sandboxes and snapshots under their keys (internal/identity): the bare
// name in the local admin's namespace, USER.NAME in another user's. The API gives it keys, and
// shows its answers' keys to their owners as bare names; what it says about a sandbox or a
// snapshot in a message, an error or a hostname names it as its owner does.

// displayName is the name key shows its owner: the sandbox's hostname, and what messages quote.
func displayName(key string) string {
	_, name := identity.Split(key)
	return name
}

// validKey checks the name of a key given for kind; its namespace is the caller's to check.
func validKey(kind, key string) error {
	return api.ValidateName(kind, displayName(key))
}
