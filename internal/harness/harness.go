// Package harness is the registry of harness adapters: it picks an adapter by name. What an
// adapter is (how to start a coding-agent harness in ACP mode, its environment, logins and
// install script) is defined in internal/harness/adapter; each adapter is a package under
// internal/harness/<name>. The registry is a plain switch, not a plugin system.
package harness

import (
	"fmt"
	"strings"

	"github.com/hiloop/hiloop/internal/harness/adapter"
	"github.com/hiloop/hiloop/internal/harness/claudecode"
	"github.com/hiloop/hiloop/internal/harness/codex"
	"github.com/hiloop/hiloop/internal/harness/fake"
	"github.com/hiloop/hiloop/internal/harness/opencode"
)

// Env is what the daemon knows when it starts a harness; it is adapter.Env, named here so that
// the registry's users need one import.
type Env = adapter.Env

// Keys is adapter.Keys, the model route keys of one harness start.
type Keys = adapter.Keys

// Lookup returns the adapter named name. The adapter is the caller's: its slices are its own.
func Lookup(name string) (adapter.Adapter, error) {
	switch name {
	case claudecode.Name:
		return claudecode.Adapter(), nil
	case codex.Name:
		return codex.Adapter(), nil
	case opencode.Name:
		return opencode.Adapter(), nil
	case fake.Name:
		return fake.Adapter(), nil
	}
	return adapter.Adapter{}, fmt.Errorf("unknown harness %q: use one of %s", name, strings.Join(Names(), ", "))
}

// Names lists the adapters, in the order help texts show them.
func Names() []string {
	return []string{claudecode.Name, codex.Name, opencode.Name, fake.Name}
}
