// Package codex is the codex harness adapter: OpenAI's Codex in ACP mode through
// @agentclientprotocol/codex-acp, run on a Node 22 installed beside it. It says how to install
// and start the harness, what environment it needs and which of Codex's settings hiloop keeps.
// Installing it and its answer to ACP initialize are checked in a sandbox
// (testdata/script/harnesses.txtar); turns through the model route, approvals and a restart in
// testdata/script/route_codex.txtar.
package codex

import (
	"encoding/json"
	"strings"

	"github.com/hiloop/hiloop/internal/harness/adapter"
)

// Name is the harness name sessions use.
const Name = "codex"

// Package is the npm package of the ACP adapter.
const Package = "@agentclientprotocol/codex-acp"

// Version is the pinned codex-acp release.
const Version = "2.6.0"

// Dir is where Install puts the adapter and its Node.
const Dir = "/opt/hiloop/harness/codex"

// Home is CODEX_HOME, in /workspace so that sessions survive a sandbox restart.
const Home = "/workspace/.hiloop/codex"

// Placeholder is the API key the harness sees when the daemon gives it no key of the model
// route's (Env.Keys): the route refuses it.
const Placeholder = "hiloop-placeholder-openai-api-key"

// GatewayPath is the gateway's OpenAI route, with the /v1 that a provider's base_url includes.
const GatewayPath = "/openai/v1"

// ProviderID is the id of the Codex model provider that points at the model route. Codex does
// not read OPENAI_BASE_URL, and its built-in openai provider wants a sign-in; a provider of its
// own is the supported way to another base URL and an API key from the environment.
const ProviderID = "hiloop"

// Adapter returns the codex adapter: the start script, then codex-acp on the pinned Node
// through the launcher Install writes.
func Adapter() adapter.Adapter {
	return adapter.Adapter{
		Name: Name,
		Argv: []string{"/bin/sh", "-c", start, Dir + "/bin/codex-acp"},
		Env:  env,
		Logins: []adapter.Login{
			{Name: "api-key", Description: "an OpenAI API key, swapped in by the gateway"},
		},
		Install: install,
		Version: Version,
	}
}

// env returns the harness's environment. With a gateway, CODEX_CONFIG (codex-acp merges it into
// Codex's session config, and passes model_provider and its provider to the app server as -c
// overrides) makes the model route Codex's provider: the Responses API over HTTP with the token
// as the API key (the route refuses a WebSocket, so Codex is told not to try one first).
// Without a gateway Codex keeps its own provider. PATH puts the pinned Node and the installed
// codex first, for the processes codex-acp starts.
func env(e adapter.Env) []string {
	env := []string{
		"OPENAI_API_KEY=" + adapter.Or(e.Keys.OpenAI, Placeholder),
		"CODEX_HOME=" + Home,
		"PATH=" + Dir + "/node_modules/node/bin:" + Dir + "/node_modules/.bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		configEnv + "=" + config,
	}
	if e.GatewayURL != "" {
		c, _ := json.Marshal(map[string]any{ // cannot fail: strings and a bool
			"model_provider": ProviderID,
			"model_providers": map[string]any{ProviderID: map[string]any{
				"name":                "hiloop model route",
				"base_url":            strings.TrimRight(e.GatewayURL, "/") + GatewayPath,
				"env_key":             "OPENAI_API_KEY",
				"wire_api":            "responses",
				"supports_websockets": false,
			}},
		})
		env = append(env, "CODEX_CONFIG="+string(c))
	}
	return env
}

// config is what hiloop keeps in $CODEX_HOME/config.toml, Codex's user configuration, read by
// the app server at its start (codex-acp takes the permission profiles it offers as modes from
// there, not from CODEX_CONFIG). Codex's own sandbox (bubblewrap) cannot start in a hiloop
// sandbox, which has no user namespaces for it and is itself the boundary: the hiloop profile
// runs commands without it. on-request approvals reviewed by the user send what Codex asks about
// (commands it finds dangerous, escalations) to the ACP client, where the session's permission
// policy answers; Codex 0.166 refuses the "untrusted" policy that asked about every command.
// Plugins and remote control would only reach GitHub and chatgpt.com at every start.
const config = configMarker + `
# Delete that line to make the file yours: hiloop then leaves it as it is.
default_permissions = "hiloop"
approval_policy = "on-request"
approvals_reviewer = "user"

[permissions.hiloop.filesystem]
":root" = "write"

[permissions.hiloop.network]
enabled = true

[features]
plugins = false
remote_control = false
`

// configMarker is the first line of config; a config.toml that starts with it is hiloop's.
const configMarker = "# Written by hiloop at every start of the codex harness while this line is first."

// configEnv carries config to the start script, which takes it out of the environment.
const configEnv = "HILOOP_CODEX_CONFIG_TOML"

// start is the script Argv runs: it writes config into $CODEX_HOME/config.toml unless the file
// is the user's own (there and not starting with configMarker), then runs the launcher ($0).
// It is a script of the argv rather than of the launcher so that it takes effect without a
// rebuild of the image.
const start = `set -eu
mkdir -p "$CODEX_HOME"
f="$CODEX_HOME/config.toml"
if [ ! -e "$f" ] || [ "$(head -n 1 "$f")" = "$(printf '%s\n' "$` + configEnv + `" | head -n 1)" ]; then
	printf '%s' "$` + configEnv + `" >"$f.hiloop"
	mv -f "$f.hiloop" "$f"
fi
unset ` + configEnv + `
exec "$0" "$@"
`

// CodexVersion is the pinned release of @openai/codex, the package of the Codex binary that
// codex-acp runs (codex-acp 2.6.0 asks for ^0.166.0).
const CodexVersion = "0.166.0"

// npm is Node 22 (the npm package node), the pinned Codex and the pinned adapter, installed into
// Dir.
var npm = adapter.NPM{
	Harness: Name,
	Dir:     Dir,
	Package: Package,
	Version: Version,
	Entry:   "dist/index.js",
	Node22:  true,
	Pins:    []string{"@openai/codex@" + CodexVersion},
}

// launcher starts codex-acp on the Node 22 beside it. Codex refuses to start when CODEX_HOME
// does not exist, and CODEX_HOME is in /workspace, which the image build cannot reach: the
// launcher makes it at every start.
var launcher = `#!/bin/sh
# Written by hiloop's codex install script. Makes $CODEX_HOME, which Codex needs to exist, then
# starts codex-acp.
set -eu
dir=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${CODEX_HOME:-}" ]; then
	mkdir -p "$CODEX_HOME"
fi
exec "$dir/node_modules/node/bin/node" "$dir/` + npm.EntryPath() + `" "$@"
`

// install installs what npm names, checks that the Codex binary codex-acp runs arrived with it
// (from the npm registry, @openai/codex's per-platform package, not a download at first start),
// then writes the launcher into Dir/bin.
var install = func() string {
	n := npm
	n.Then = `timeout 60 "$dir/node_modules/node/bin/node" "$dir/node_modules/@openai/codex/bin/codex.js" --version` + "\n" +
		adapter.WriteLauncher("codex-acp", launcher)
	return n.Script()
}()
