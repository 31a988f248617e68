// Package claudecode is the claude-code harness adapter: Claude Code in ACP mode through
// @agentclientprotocol/claude-agent-acp, run on a Node 22 installed beside it. It says how to
// install and start the harness and what environment it needs.
package claudecode

import (
	"strings"

	"github.com/hiloop/hiloop/internal/harness/adapter"
	"github.com/hiloop/hiloop/pkg/api"
)

// Name is the harness name sessions use.
const Name = api.HarnessClaudeCode

// Package is the npm package of the ACP adapter.
const Package = "@agentclientprotocol/claude-agent-acp"

// Version is the pinned claude-agent-acp release; it needs Node >= 22, and without the pin npm
// on an older Node silently installs 0.49.0.
const Version = "0.101.0"

// Dir is where Install puts the adapter, its Node and the launcher.
const Dir = "/opt/hiloop/harness/claude-code"

// ConfigDir is CLAUDE_CONFIG_DIR. It is in /workspace so that sessions (under projects/) survive
// a sandbox restart and session/load finds them; it is not /workspace/.claude, which Claude Code
// would also read as the project's settings.
const ConfigDir = "/workspace/.hiloop/claude-code"

// Placeholder is the API key the harness sees when the daemon gives it no key of the model
// route's (Env.Keys): the route refuses it.
const Placeholder = "hiloop-placeholder-anthropic-api-key"

// GatewayPath is the gateway's Anthropic route; Claude Code appends /v1/messages.
const GatewayPath = "/anthropic"

// Adapter returns the claude-code adapter.
func Adapter() adapter.Adapter {
	return adapter.Adapter{
		Name: Name,
		// The launcher Install writes: it pins the permission mode, then runs the adapter.
		Argv: []string{Dir + "/bin/claude-code-acp"},
		Env:  env,
		Logins: []adapter.Login{
			{Name: "api-key", Description: "an Anthropic API key, sent as x-api-key and swapped in by the gateway"},
		},
		Install: install,
		Version: Version,
	}
}

// env returns the harness's environment; without a gateway the base URL is left out.
func env(e adapter.Env) []string {
	env := []string{
		"ANTHROPIC_API_KEY=" + adapter.Or(e.Keys.Anthropic, Placeholder),
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", // no telemetry or update checks: there is no way out but the gateway
		"CLAUDE_CONFIG_DIR=" + ConfigDir,
	}
	if e.GatewayURL != "" {
		env = append(env, "ANTHROPIC_BASE_URL="+strings.TrimRight(e.GatewayURL, "/")+GatewayPath)
	}
	return env
}

// launcher starts claude-agent-acp on the Node 22 beside it. It first pins Claude Code's
// permission mode to "default" in $CLAUDE_CONFIG_DIR/settings.json, keeping every other setting:
// 0.101.0 otherwise starts in "auto", which asks the model instead of the ACP client. The config
// dir is in /workspace, which the image build cannot reach, so the pin happens at every start.
var launcher = `#!/bin/sh
# Written by hiloop's claude-code install script. Pins Claude Code's permission mode to "default"
# so that session/request_permission reaches the ACP client, then starts claude-agent-acp.
set -eu
dir=$(cd "$(dirname "$0")/.." && pwd)
node="$dir/node_modules/node/bin/node"
config="${CLAUDE_CONFIG_DIR:-$HOME/.claude}"
mkdir -p "$config"
"$node" -e '
const fs = require("fs");
const path = process.argv[1];
let settings = {};
try {
  settings = JSON.parse(fs.readFileSync(path, "utf8"));
} catch (e) {
  if (e.code !== "ENOENT") throw e;
}
settings.permissions = { ...settings.permissions, defaultMode: "default" };
fs.writeFileSync(path, JSON.stringify(settings, null, 2) + "\n");
' "$config/settings.json"
PATH="$dir/node_modules/node/bin:$PATH"
export PATH
exec "$node" "$dir/` + npm.EntryPath() + `" "$@"
`

// npm is Node 22 (the npm package node, adapter.Node22Version) and the pinned adapter, installed
// into Dir.
var npm = adapter.NPM{
	Harness: Name,
	Dir:     Dir,
	Package: Package,
	Version: Version,
	Entry:   "dist/index.js",
	Node22:  true,
}

// install installs what npm names, then writes the launcher into Dir/bin.
var install = func() string {
	n := npm
	n.Then = adapter.WriteLauncher("claude-code-acp", launcher)
	return n.Script()
}()
