//go:build unix

package modelroute

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used so far, in user space and in the kernel.
func processCPU() (user, sys time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
