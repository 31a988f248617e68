// Command sandboxd is the hiloop daemon: it runs sandboxes on this host and serves the API.
package main

import (
	"os"

	"github.com/hiloop/hiloop/internal/daemon"
)

func main() { os.Exit(daemon.Main()) }
