package adapter

import "strings"

// NPMPrelude is how the Install script of every harness installed with npm begins: it stops at
// the first failure and takes npm from Debian when the image has none.
const NPMPrelude = `set -euo pipefail
if ! command -v npm >/dev/null 2>&1; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
`

// Node22Version is the exact Node 22 release (the npm package node) that NPM.Node22 installs:
// pinned, so that an image rebuilt later runs the Node it was checked with.
const Node22Version = "22.23.3"

// NPM is a harness installed from the npm registry into a directory of its own.
type NPM struct {
	// Harness is the harness's name, for error messages, e.g. "codex".
	Harness string
	// Dir is the directory it is installed into (node_modules is Dir/node_modules); the script
	// sets $dir to it.
	Dir string
	// Package is the npm package, e.g. "@agentclientprotocol/codex-acp".
	Package string
	// Version is Package's exact version: without a pin, npm installs whatever the image's Node
	// accepts, which can be a much older release.
	Version string
	// Entry is the package's JavaScript entry point relative to the package's directory, e.g.
	// "dist/index.js": the script fails unless the install put it there, and the harness is
	// started through EntryPath. Empty for a package run otherwise (a native binary in
	// node_modules/.bin).
	Entry string
	// Node22 installs the npm package node@Node22Version beside Package, for a harness that
	// needs a newer Node than the image's (node_modules/node/bin/node), and checks its version.
	Node22 bool
	// Pins are exact versions of Package's dependencies, installed beside it ("name@version"),
	// for a dependency Package names by a range: npm then resolves Package's to the pinned one.
	Pins []string
	// Then is shell, run in $dir after the install and the checks of Node22 and Entry, that
	// fails when the install is unusable and finishes it (e.g. writes a launcher).
	Then string
}

// EntryPath is the path of Entry relative to Dir: node_modules/<Package>/<Entry>.
func (n NPM) EntryPath() string {
	return "node_modules/" + n.Package + "/" + n.Entry
}

// WriteLauncher returns shell, for Then, that writes script to $dir/bin/name, executable by
// every user: a harness started through a launcher of its own (see its adapter's Argv).
func WriteLauncher(name, script string) string {
	return `mkdir -p "$dir/bin"
cat >"$dir/bin/` + name + `" <<'LAUNCHER'
` + script + `LAUNCHER
chmod 0755 "$dir/bin/` + name + `"
`
}

// Script returns the Install script: NPMPrelude, the pinned npm install into Dir, the checks of
// Node22 and Entry, Then, and permissions that let every user (the agent runs as uid 1000) read
// and run what was installed.
func (n NPM) Script() string {
	var b strings.Builder
	b.WriteString(NPMPrelude)
	b.WriteString("dir=" + n.Dir + "\n")
	b.WriteString(`mkdir -p "$dir"
cd "$dir"
[ -f package.json ] || printf '{"private": true}\n' >package.json
npm install --no-fund --no-audit --no-update-notifier `)
	if n.Node22 {
		b.WriteString("node@" + Node22Version + " ")
	}
	for _, p := range n.Pins {
		b.WriteString(p + " ")
	}
	b.WriteString(n.Package + "@" + n.Version + "\n")
	if n.Node22 {
		b.WriteString(`if [ "$("$dir/node_modules/node/bin/node" --version)" != v` + Node22Version + ` ]; then
	echo "` + n.Harness + `: node_modules/node/bin/node is not Node ` + Node22Version + `" >&2
	exit 1
fi
`)
	}
	if n.Entry != "" {
		b.WriteString(`test -f "$dir/` + n.EntryPath() + `"` + "\n")
	}
	b.WriteString(n.Then)
	b.WriteString(`chmod -R a+rX "$dir"` + "\n")
	return b.String()
}
