// Package harness is the registry of harness adapters: how to start each coding-agent harness in
// ACP mode inside a sandbox, the environment it needs (never secret values), the logins it
// supports and how to install it into an image. The registry is a plain switch; each adapter is
// a leaf package under internal/harness/<name>.
package harness

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hiloop/hiloop/internal/harness/claudecode"
	"github.com/hiloop/hiloop/internal/harness/codex"
	"github.com/hiloop/hiloop/internal/harness/fake"
	"github.com/hiloop/hiloop/internal/harness/opencode"
)

// Env is what the daemon knows when it starts a harness.
type Env struct {
	// GatewayURL is the egress gateway's base URL as a sandbox reaches it, e.g.
	// "http://10.0.0.1:8080"; empty until the gateway exists.
	//
	// TODO(gateway issue): the daemon sets it (internal/daemon passes acp.Config.Gateway), and an
	// image definition runs the adapters' Install scripts, so claude-code, codex and opencode run
	// for real; until then only the fake harness can answer a prompt.
	GatewayURL string
}

// Login is one way a harness can authenticate to its model provider.
type Login struct {
	// Name is the login's name, e.g. "api-key".
	Name string
	// Description says what it needs, e.g. "an Anthropic API key, swapped in by the gateway".
	Description string
}

// Adapter says how to run one harness.
type Adapter struct {
	// Name is the name sessions use, e.g. "claude-code".
	Name string
	// Argv starts the harness in ACP mode (ACP on stdin/stdout, logs on stderr).
	Argv []string
	// Env returns the environment the harness needs on top of a login environment, as
	// KEY=value strings; values are placeholders or addresses, never secrets.
	Env func(Env) []string
	// Logins are the login methods the harness supports.
	Logins []Login
	// Install is a shell script, run as root in the image's root filesystem at build time, that
	// installs the harness; empty when the daemon provides it (fake).
	Install string
}

// Lookup returns the adapter named name. The adapter is the caller's: its slices are copies.
func Lookup(name string) (Adapter, error) {
	switch name {
	case claudecode.Name:
		return Adapter{
			Name:    claudecode.Name,
			Argv:    slices.Clone(claudecode.Argv),
			Env:     func(e Env) []string { return claudecode.Env(e.GatewayURL) },
			Logins:  logins(claudecode.Logins),
			Install: claudecode.Install,
		}, nil
	case codex.Name:
		return Adapter{
			Name:    codex.Name,
			Argv:    slices.Clone(codex.Argv),
			Env:     func(e Env) []string { return codex.Env(e.GatewayURL) },
			Logins:  logins(codex.Logins),
			Install: codex.Install,
		}, nil
	case opencode.Name:
		return Adapter{
			Name:    opencode.Name,
			Argv:    slices.Clone(opencode.Argv),
			Env:     func(e Env) []string { return opencode.Env(e.GatewayURL) },
			Logins:  logins(opencode.Logins),
			Install: opencode.Install,
		}, nil
	case fake.Name:
		return Adapter{
			Name: fake.Name,
			Argv: slices.Clone(fake.Argv),
			Env:  func(e Env) []string { return fake.Env(e.GatewayURL) },
		}, nil
	}
	return Adapter{}, fmt.Errorf("unknown harness %q: use one of %s", name, strings.Join(Names(), ", "))
}

// logins converts an adapter package's logins, which cannot use Login without importing this
// package.
func logins[L ~struct{ Name, Description string }](ls []L) []Login {
	out := make([]Login, len(ls))
	for i, l := range ls {
		out[i] = Login(l)
	}
	return out
}

// Names lists the adapters, in the order help texts show them.
func Names() []string {
	return []string{claudecode.Name, codex.Name, opencode.Name, fake.Name}
}
