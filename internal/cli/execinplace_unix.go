//go:build !windows

package cli

import (
	"os"
	"syscall"
)

// execInPlace replaces the process with bin; it returns only on failure.
func execInPlace(bin string, argv []string) error {
	return syscall.Exec(bin, argv, os.Environ())
}
