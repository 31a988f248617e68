// Command hiloop is the CLI for sandboxd.
package main

import (
	"os"

	"github.com/hiloop/hiloop/internal/cli"
)

func main() { os.Exit(cli.Main()) }
