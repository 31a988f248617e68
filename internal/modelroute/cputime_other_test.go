//go:build !unix

package modelroute

import "time"

// processCPU reports nothing where getrusage is missing: the CPU figures read 0.
func processCPU() (user, sys time.Duration) { return 0, 0 }
