// Command hiloop-ssh is hiloop's SSH shaped as a plain remote-shell program, for tools that
// cannot pass `--`: GIT_SSH_COMMAND=hiloop-ssh, rsync -e hiloop-ssh, scp -S hiloop-ssh.
//
//	hiloop-ssh [ssh options] NAME [CMD...]
package main

import (
	"os"

	"github.com/hiloop/hiloop/internal/cli"
)

func main() { os.Exit(cli.SSHShimMain()) }
