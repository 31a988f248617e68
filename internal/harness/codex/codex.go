// Package codex is the codex harness adapter: OpenAI's Codex in ACP mode through
// @agentclientprotocol/codex-acp, run on a Node 22 installed beside it. It says how to install
// and start the harness and what environment it needs. Installing it and its answer to ACP
// initialize are checked in a sandbox (testdata/script/harnesses.txtar); a model turn through
// the gateway is not yet, and the environment follows Codex's documented variables.
package codex

import (
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

// Placeholder is the API key the harness sees; the gateway swaps in the real one.
const Placeholder = "hiloop-placeholder-openai-api-key"

// GatewayPath is the gateway's OpenAI route, with the /v1 that OPENAI_BASE_URL includes.
const GatewayPath = "/openai/v1"

// Adapter returns the codex adapter: codex-acp on the pinned Node, through the launcher Install
// writes.
func Adapter() adapter.Adapter {
	return adapter.Adapter{
		Name: Name,
		Argv: []string{Dir + "/bin/codex-acp"},
		Env:  env,
		Logins: []adapter.Login{
			{Name: "api-key", Description: "an OpenAI API key, swapped in by the gateway"},
		},
		Install: install,
		Version: Version,
	}
}

// env returns the harness's environment; without a gateway the base URL is left out. PATH puts
// the pinned Node and the installed codex first, for the processes codex-acp starts.
func env(e adapter.Env) []string {
	env := []string{
		"OPENAI_API_KEY=" + adapter.Or(e.Keys.OpenAI, Placeholder),
		"CODEX_HOME=" + Home,
		"PATH=" + Dir + "/node_modules/node/bin:" + Dir + "/node_modules/.bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	}
	if e.GatewayURL != "" {
		env = append(env, "OPENAI_BASE_URL="+strings.TrimRight(e.GatewayURL, "/")+GatewayPath)
	}
	return env
}

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
