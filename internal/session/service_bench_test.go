package session

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkChattyTurn runs turns of 10,000 updates of the fake harness through the supervisor
// and the event log (real fsync) and reports updates stored per second. The harness runs as a
// local process: this is the daemon's side of a turn, without a sandbox, WebSocket or CLI.
//
// It also reports the CPU time each update costs the harness process and this one (the daemon's
// side, and the test reading the turn's events back), which a loaded machine disturbs less than
// the rate.
func BenchmarkChattyTurn(b *testing.B) {
	const updates = 10000
	e := newEnv(b)
	id := e.create("")
	prompt := e.script("chatty.fake", fmt.Sprintf("repeat %d message chunk {i}\n", updates))
	e.turn(id, "warm up") // the harness starts outside the timing
	e.boxes.mu.Lock()
	pid := e.boxes.procs[0].cmd.Process.Pid
	e.boxes.mu.Unlock()
	harness0, self0 := procCPU(b, pid), selfCPU(b)
	b.ResetTimer()
	for range b.N {
		if evs := e.turn(id, prompt); len(evs) != updates+2 {
			b.Fatalf("%d events, want %d", len(evs), updates+2)
		}
	}
	b.StopTimer()
	n := float64(b.N * updates)
	b.ReportMetric(n/b.Elapsed().Seconds(), "updates/s")
	b.ReportMetric(float64((procCPU(b, pid)-harness0).Microseconds())/n, "harness-µs/update")
	b.ReportMetric(float64((selfCPU(b)-self0).Microseconds())/n, "daemon-µs/update")
}

// selfCPU is the user and system CPU time this process has used.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the user and system CPU time process pid has used, from /proc (in clock ticks of
// 10 ms: enough over turns that take a second of CPU).
func procCPU(b *testing.B, pid int) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's name, which is in parentheses: utime and stime are the
	// 14th and 15th of the line, the 12th and 13th after ")".
	_, rest, _ := strings.Cut(string(stat), ") ")
	f := strings.Fields(rest)
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("parse %s: %v %v", stat, err1, err2)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
