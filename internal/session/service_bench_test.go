package session

import (
	"fmt"
	"testing"
)

// BenchmarkChattyTurn runs turns of 10,000 updates of the fake harness through the supervisor
// and the event log (real fsync) and reports updates stored per second. The harness runs as a
// local process: this is the daemon's side of a turn, without a sandbox, WebSocket or CLI.
func BenchmarkChattyTurn(b *testing.B) {
	const updates = 10000
	e := newEnv(b)
	id := e.create("")
	prompt := e.script("chatty.fake", fmt.Sprintf("repeat %d message chunk {i}\n", updates))
	e.turn(id, "warm up") // the harness starts outside the timing
	b.ResetTimer()
	for range b.N {
		if evs := e.turn(id, prompt); len(evs) != updates+2 {
			b.Fatalf("%d events, want %d", len(evs), updates+2)
		}
	}
	b.ReportMetric(float64(b.N*updates)/b.Elapsed().Seconds(), "updates/s")
}
