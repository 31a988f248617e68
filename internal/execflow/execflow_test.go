package execflow

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

func TestCreditWaitsForAck(t *testing.T) {
	ctx := context.Background()
	c := NewCredit(10)
	if err := c.Take(ctx, 8); err != nil {
		t.Fatal(err)
	}
	// 2 left: taking 4 must wait until an ack returns enough.
	got := make(chan error, 1)
	go func() { got <- c.Take(ctx, 4) }()
	select {
	case err := <-got:
		t.Fatalf("Take(4) with 2 left returned %v before any ack", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := c.Add(3); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// 1 left now; acknowledging more than was sent is the peer's error.
	if err := c.Add(10); err == nil {
		t.Fatal("Add beyond the window succeeded")
	}
	if err := c.Add(0); err == nil {
		t.Fatal("Add(0) succeeded")
	}
}

func TestCreditTakeCancelled(t *testing.T) {
	c := NewCredit(4)
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Take(ctx, 4); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := c.Take(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Take on a cancelled context with no credit = %v", err)
	}
}

func TestCreditChunkLargerThanWindow(t *testing.T) {
	c := NewCredit(4)
	if err := c.Take(context.Background(), 9); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(4); err != nil { // not all 9: the window is 4 and avail was -5
		t.Fatal(err)
	}
}

func TestQueueOverrunAndOrder(t *testing.T) {
	q := NewQueue(6)
	if err := q.Put([]byte("abc"), 3); err != nil {
		t.Fatal(err)
	}
	if err := q.Put([]byte("de"), 2); err != nil {
		t.Fatal(err)
	}
	if err := q.Put([]byte("fg"), 2); !errors.Is(err, ErrOverrun) {
		t.Fatalf("Put beyond the limit = %v, want ErrOverrun", err)
	}
	q.Close()
	if err := q.Put([]byte("h"), 1); err == nil {
		t.Fatal("Put after Close succeeded")
	}
	var got bytes.Buffer
	var acks []int64
	err := Drain(context.Background(), q, func(b []byte) error { got.Write(b); return nil },
		func(n int64) error { acks = append(acks, n); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != "abcde" {
		t.Fatalf("drained %q, want abcde", got.String())
	}
	var sum int64
	for _, n := range acks {
		sum += n
	}
	if len(acks) != 2 || sum != 5 { // a quarter of 6 is 1: each buffer is acknowledged
		t.Fatalf("acknowledged %v, want [3 2]", acks)
	}
}

func TestDrainAcksAsTheConsumerTakes(t *testing.T) {
	// A producer limited by credit and a slow consumer: everything arrives in order and the
	// producer is never more than the window ahead.
	const window, total = 64, 4096
	ctx := context.Background()
	q := NewQueue(window)
	credit := NewCredit(window)
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < total; i += 16 {
			b := bytes.Repeat([]byte{byte(i / 16)}, 16)
			if err := credit.Take(ctx, 16); err != nil {
				errc <- err
				return
			}
			if err := q.Put(b, 16); err != nil {
				errc <- err
				return
			}
		}
		q.Close()
		errc <- nil
	}()
	var got []byte
	err := Drain(ctx, q, func(b []byte) error {
		time.Sleep(100 * time.Microsecond)
		got = append(got, b...)
		return nil
	}, func(n int64) error { return credit.Add(n) })
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if len(got) != total {
		t.Fatalf("got %d bytes, want %d", len(got), total)
	}
	for i, b := range got {
		if b != byte(i/16) {
			t.Fatalf("byte %d = %d, want %d: out of order", i, b, byte(i/16))
		}
	}
}

func TestDrainStopsOnConsumerError(t *testing.T) {
	q := NewQueue(10)
	_ = q.Put([]byte("x"), 1)
	boom := errors.New("boom")
	if err := Drain(context.Background(), q, func([]byte) error { return boom }, func(int64) error { return nil }); !errors.Is(err, boom) {
		t.Fatalf("Drain = %v, want the consumer's error", err)
	}
}
