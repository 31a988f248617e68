// Package codex is the codex harness adapter: OpenAI's Codex in ACP mode through
// @agentclientprotocol/codex-acp, run on a Node 22 installed beside it. It says how to install
// and start the harness, what environment it needs and which of Codex's settings hiloop keeps.
// Installing it and its answer to ACP initialize are checked in a sandbox
// (testdata/script/harnesses.txtar); turns through the model route, approvals and a restart in
// testdata/script/route_codex.txtar; ChatGPT mode in testdata/script/route_codex_chatgpt.txtar.
package codex

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/hiloop/hiloop/internal/harness/adapter"
	"github.com/hiloop/hiloop/internal/modelroute"
	"github.com/hiloop/hiloop/pkg/api"
)

// Name is the harness name sessions use.
const Name = api.HarnessCodex

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

// The model route's ChatGPT paths. chatgpt_base_url must contain /backend-api: Codex 0.166 then
// asks for {base}/wham/… as of chatgpt.com (else {base}/api/codex/…), and its provider's
// Responses requests go to {base}/codex/responses, as with its built-in ChatGPT provider.
const (
	ChatGPTBasePath    = "/chatgpt/backend-api"
	ChatGPTRefreshPath = "/chatgpt/oauth/token"
	ChatGPTRevokePath  = "/chatgpt/oauth/revoke"
)

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
			{Name: "chatgpt", Description: "a ChatGPT plan's login (Codex's auth.json): Codex runs in ChatGPT mode with placeholders, the gateway swaps in the tokens"},
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
// codex first, for the processes codex-acp starts. With a placeholder ChatGPT login (and a
// gateway) Codex runs in ChatGPT mode instead: chatgptEnv.
func env(e adapter.Env) []string {
	if e.GatewayURL != "" && e.Keys.ChatGPT != nil {
		return chatgptEnv(e)
	}
	env := []string{
		"OPENAI_API_KEY=" + adapter.Or(e.Keys.OpenAI, Placeholder),
		"CODEX_HOME=" + Home,
		"PATH=" + path,
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

// path is the harness's PATH (see env).
const path = Dir + "/node_modules/node/bin:" + Dir + "/node_modules/.bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// chatgptEnv is the environment of Codex in ChatGPT mode, as with a ChatGPT plan's login but
// every credential a placeholder: the start script writes the placeholder login into
// $CODEX_HOME/auth.json; the hiloop provider points at the route's ChatGPT path with
// requires_openai_auth, so that Codex sends the login's access token (the route token) and
// account as it does to chatgpt.com; chatgpt_base_url (in config.toml: the app server reads it
// at its start) points its other backend calls at the route too, and the override variables
// its refresh and logout. There is no OPENAI_API_KEY: the login is the only credential.
func chatgptEnv(e adapter.Env) []string {
	gw := strings.TrimRight(e.GatewayURL, "/")
	c, _ := json.Marshal(map[string]any{ // cannot fail: strings and bools
		"model_provider": ProviderID,
		"model_providers": map[string]any{ProviderID: map[string]any{
			"name":                 "hiloop model route (ChatGPT)",
			"base_url":             gw + ChatGPTBasePath + "/codex",
			"requires_openai_auth": true,
			"wire_api":             "responses",
			"supports_websockets":  false,
		}},
	})
	return []string{
		"CODEX_HOME=" + Home,
		"PATH=" + path,
		configEnv + "=" + chatgptConfig(gw+ChatGPTBasePath),
		"CODEX_CONFIG=" + string(c),
		"CODEX_REFRESH_TOKEN_URL_OVERRIDE=" + gw + ChatGPTRefreshPath,
		"CODEX_REVOKE_TOKEN_URL_OVERRIDE=" + gw + ChatGPTRevokePath,
		authEnv + "=" + authFile(*e.Keys.ChatGPT, time.Now()),
	}
}

// authFile is Codex's auth.json for a placeholder ChatGPT login, as `codex login` writes it for
// a real one.
func authFile(l adapter.ChatGPTLogin, now time.Time) string {
	b, _ := json.Marshal(map[string]any{ // cannot fail: strings
		"auth_mode":      "chatgpt",
		"OPENAI_API_KEY": nil,
		"tokens": map[string]string{
			"id_token": l.IDToken, "access_token": l.AccessToken, "refresh_token": l.RefreshToken, "account_id": l.AccountID,
		},
		"last_refresh": now.UTC().Format(time.RFC3339),
	})
	return string(b)
}

// config is what hiloop keeps in $CODEX_HOME/config.toml, Codex's user configuration, read by
// the app server at its start (codex-acp takes the permission profiles it offers as modes from
// there, not from CODEX_CONFIG). Codex's own sandbox (bubblewrap) cannot start in a hiloop
// sandbox, which has no user namespaces for it and is itself the boundary: the hiloop profile
// runs commands without it. on-request approvals reviewed by the user send what Codex asks about
// (commands it finds dangerous, escalations) to the ACP client, where the session's permission
// policy answers; Codex 0.166 refuses the "untrusted" policy that asked about every command.
// Plugins and remote control would only reach GitHub and chatgpt.com at every start.
const config = configHead + configTables

// chatgptConfig is config for ChatGPT mode: Codex's other calls to the ChatGPT backend go to
// the route at base, and those hiloop has no use for are off (the apps' MCP server, analytics
// events: the route would refuse them).
func chatgptConfig(base string) string {
	b, _ := json.Marshal(base) // a TOML basic string is a JSON string here: no control characters
	return configHead + "chatgpt_base_url = " + string(b) + "\n" + configTables + `apps = false

[analytics]
enabled = false
`
}

// configHead and configTables are config's top-level keys and its tables, around which
// chatgptConfig puts its own.
const configHead = configMarker + `
# Delete that line to make the file yours: hiloop then leaves it as it is.
default_permissions = "hiloop"
approval_policy = "on-request"
approvals_reviewer = "user"
`

const configTables = `
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

// authEnv carries the placeholder auth.json to the start script, likewise.
const authEnv = "HILOOP_CODEX_AUTH_JSON"

// start is the script Argv runs: it writes config into $CODEX_HOME/config.toml unless the file
// is the user's own (there and not starting with configMarker); it writes the placeholder
// auth.json, unless the file there is the user's own (one without a placeholder refresh token),
// or, with none to write, removes the one hiloop wrote (Codex rewrites the file when it
// refreshes, keeping only its own fields: the refresh token's prefix is the mark that lasts);
// then it runs the launcher ($0). It is a script of the argv rather than of the launcher so
// that it takes effect without a rebuild of the image.
const start = `set -eu
mkdir -p "$CODEX_HOME"
f="$CODEX_HOME/config.toml"
if [ ! -e "$f" ] || [ "$(head -n 1 "$f")" = "$(printf '%s\n' "$` + configEnv + `" | head -n 1)" ]; then
	printf '%s' "$` + configEnv + `" >"$f.hiloop"
	mv -f "$f.hiloop" "$f"
fi
unset ` + configEnv + `
a="$CODEX_HOME/auth.json"
ours() { [ -e "$a" ] && grep -Eq '"refresh_token"[[:space:]]*:[[:space:]]*"` + modelroute.RefreshTokenPrefix + `' "$a"; }
if [ -n "${` + authEnv + `:-}" ]; then
	if [ ! -e "$a" ] || ours; then
		(umask 077 && printf '%s' "$` + authEnv + `" >"$a.hiloop")
		mv -f "$a.hiloop" "$a"
	fi
elif ours; then
	rm -f "$a"
fi
unset ` + authEnv + `
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
