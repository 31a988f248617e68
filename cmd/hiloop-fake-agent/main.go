// Command hiloop-fake-agent is the fake harness: a scripted ACP agent on stdin/stdout for tests.
// See package internal/harness/fake for its state directory and script format.
package main

import (
	"os"

	"github.com/hiloop/hiloop/internal/harness/fake"
)

func main() { os.Exit(fake.Main()) }
