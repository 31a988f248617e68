//go:build linux

// Command hiloop-init is PID 1 inside every sandbox: it reaps orphans and serves the daemon's
// execs on the socket passed as fd 3. Build it static: CGO_ENABLED=0 go build ./cmd/hiloop-init.
package main

import (
	"os"

	"github.com/hiloop/hiloop/internal/runtime/initproc"
)

func main() { os.Exit(initproc.Main()) }
