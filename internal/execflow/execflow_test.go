package execflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
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
	q := NewQueue(8)
	for _, p := range []struct {
		id   byte
		data string
	}{{1, "abc"}, {1, "de"}, {2, "x"}, {1, "f"}} {
		if err := q.Put(p.id, []byte(p.data)); err != nil {
			t.Fatal(err)
		}
	}
	// One byte of room left: a message of two overruns (what fit stays queued; the caller ends
	// the stream on the error).
	if err := q.Put(2, []byte("yz")); !errors.Is(err, ErrOverrun) {
		t.Fatalf("Put beyond the limit = %v, want ErrOverrun", err)
	}
	q.Close()
	if err := q.Put(1, []byte("h")); err == nil {
		t.Fatal("Put after Close succeeded")
	}
	var got []string
	var acked int64
	err := Drain(context.Background(), q, func(id byte, b []byte) error {
		got = append(got, fmt.Sprintf("%d:%s", id, b))
		return nil
	}, func(n int64) error { acked += n; return nil })
	if err != nil {
		t.Fatal(err)
	}
	// A stretch is at most an eighth of the window (1 byte here) at a time; consecutive
	// messages of one stream run together.
	want := "1:a 1:b 1:c 1:d 1:e 2:x 1:f 2:y"
	if s := strings.Join(got, " "); s != want {
		t.Fatalf("drained %q, want %q", s, want)
	}
	if acked != 8 { // a quarter of 8 is 2: everything consumed is acknowledged
		t.Fatalf("acknowledged %d bytes, want 8", acked)
	}
}

func TestQueueWrapsAround(t *testing.T) {
	// Through a ring of 16 bytes, 1,000 messages of sizes that never line up with it: the
	// consumer sees every byte once, in order, each with its stream.
	const window = 16
	ctx := context.Background()
	q := NewQueue(window)
	credit := NewCredit(window)
	var want bytes.Buffer
	errc := make(chan error, 1)
	go func() {
		for i := range 1000 {
			n := 1 + i%7
			b := bytes.Repeat([]byte{byte(i)}, n)
			want.Write(b)
			if err := credit.Take(ctx, int64(n)); err != nil {
				errc <- err
				return
			}
			if err := q.Put(byte(1+i%2), b); err != nil {
				errc <- err
				return
			}
		}
		q.Close()
		errc <- nil
	}()
	var got bytes.Buffer
	err := Drain(ctx, q, func(id byte, b []byte) error {
		for _, c := range b {
			if id != byte(1+int(c)%2) {
				return fmt.Errorf("byte %d came as stream %d", c, id)
			}
		}
		got.Write(b)
		return nil
	}, credit.Add)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("drained %d bytes differing from the %d put", got.Len(), want.Len())
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
			if err := q.Put(1, b); err != nil {
				errc <- err
				return
			}
		}
		q.Close()
		errc <- nil
	}()
	var got []byte
	err := Drain(ctx, q, func(_ byte, b []byte) error {
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
	_ = q.Put(1, []byte("x"))
	boom := errors.New("boom")
	if err := Drain(context.Background(), q, func(byte, []byte) error { return boom }, func(int64) error { return nil }); !errors.Is(err, boom) {
		t.Fatalf("Drain = %v, want the consumer's error", err)
	}
}
