package eventlog

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
)

// openBenchLog opens a log as the daemon runs it: every limit checked (none reached) and every
// session in a sandbox.
func openBenchLog(b *testing.B) *Log {
	const far = 1 << 50
	l, _ := openTestLogWith(b, Config{
		Limits:    Limits{SessionEvents: far, SessionBytes: far, SandboxEvents: far, SandboxBytes: far},
		SandboxOf: func(string) string { return "box" },
	})
	return l
}

// BenchmarkAppend measures durable (fsynced) appends with 1 and 8 concurrent appenders, plus more
// to show how group commit scales.
func BenchmarkAppend(b *testing.B) {
	for _, k := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("appenders=%d", k), func(b *testing.B) {
			l := openBenchLog(b)
			payload := data(42)
			var next atomic.Int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for range k {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if _, err := l.Append("s", api.EventUpdate, payload); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkEnqueue measures one producer queueing durable appends without waiting for each, as
// the session supervisor stores a harness's updates; the last one is waited for.
func BenchmarkEnqueue(b *testing.B) {
	l := openBenchLog(b)
	payload := data(42)
	var last Pending
	for range b.N {
		last = l.Enqueue("s", api.EventUpdate, payload)
	}
	// Timed too: the figure is events durable per second, not queued.
	if _, err := last.Wait(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkReplay100k reads 100,000 stored events from cursor 0, with Since and with a Subscription.
func BenchmarkReplay100k(b *testing.B) {
	const total = 100000
	l, _ := openTestLog(b, true)
	appendN(b, l, "s", total, 64)
	b.Run("since", func(b *testing.B) {
		for b.Loop() {
			evs, err := l.Since("s", 0, 0)
			if err != nil || len(evs) != total {
				b.Fatalf("%d events, %v", len(evs), err)
			}
		}
	})
	b.Run("subscribe", func(b *testing.B) {
		for b.Loop() {
			sub := l.Subscribe("s", 0)
			for ev := range sub.C() {
				if ev.Seq == total {
					break
				}
			}
			sub.Close()
		}
	})
}

// BenchmarkLiveLatency appends durable events one at a time while 100 subscribers watch, and
// reports the p99 delay from Append returning (and from Append being called) to each subscriber
// receiving the event.
func BenchmarkLiveLatency(b *testing.B) {
	const watchers = 100
	l, _ := openTestLog(b, false)
	n := b.N
	called := make([]int64, n)
	returned := make([]int64, n)
	recv := make([][]int64, watchers)
	var wg sync.WaitGroup
	for w := range watchers {
		recv[w] = make([]int64, n)
		sub := l.Subscribe("s", 0)
		defer sub.Close()
		wg.Go(func() {
			for ev := range sub.C() {
				recv[w][ev.Seq-1] = time.Now().UnixNano()
				if ev.Seq == uint64(n) {
					return
				}
			}
			b.Errorf("watcher %d ended early: %v", w, sub.Err())
		})
	}
	waitLive(b, l, "s", watchers)
	b.ResetTimer()
	for i := range n {
		called[i] = time.Now().UnixNano()
		if _, err := l.Append("s", api.EventUpdate, data(i)); err != nil {
			b.Fatal(err)
		}
		returned[i] = time.Now().UnixNano()
	}
	wg.Wait()
	b.StopTimer()

	fromReturn := make([]int64, 0, n*watchers)
	fromCall := make([]int64, 0, n*watchers)
	for w := range watchers {
		for i := range n {
			// Events are published before Append returns, so a watcher may see one "early".
			fromReturn = append(fromReturn, max(0, recv[w][i]-returned[i]))
			fromCall = append(fromCall, recv[w][i]-called[i])
		}
	}
	b.ReportMetric(p99ms(fromReturn), "p99-after-return-ms")
	b.ReportMetric(p99ms(fromCall), "p99-after-call-ms")
}

func p99ms(ns []int64) float64 {
	slices.Sort(ns)
	return float64(ns[len(ns)*99/100]) / 1e6
}
