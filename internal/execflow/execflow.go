// Package execflow is the exec stream's flow control (pkg/api/exec.go): the credit a sender
// spends before it writes data, and the bounded queue a receiver fills from the socket and
// drains into a slow consumer, acknowledging what the consumer took. With both ends using it,
// neither ever blocks in a socket write for long, so keepalives pass however slow the data is.
package execflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Credit is what a sender may still send: the peer's window less the bytes it has not yet
// acknowledged.
type Credit struct {
	mu      sync.Mutex
	avail   int64
	window  int64
	changed chan struct{} // closed and replaced when avail grows
}

// NewCredit returns the credit of a peer whose window is window bytes.
func NewCredit(window int64) *Credit {
	return &Credit{avail: window, window: window, changed: make(chan struct{})}
}

// Take waits until n bytes may be sent and spends them. n above the window is taken once the
// whole window is free, so that a chunk larger than a small window still goes out.
func (c *Credit) Take(ctx context.Context, n int64) error {
	for {
		c.mu.Lock()
		if c.avail >= min(n, c.window) {
			c.avail -= n
			c.mu.Unlock()
			return nil
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Window is the peer's window.
func (c *Credit) Window() int64 { return c.window }

// Add returns n bytes the peer acknowledged. Acknowledging more than was sent is the peer's
// protocol error.
func (c *Credit) Add(n int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n <= 0 || c.avail+n > c.window {
		return fmt.Errorf("acknowledged %d bytes, more than were sent", n)
	}
	c.avail += n
	close(c.changed)
	c.changed = make(chan struct{})
	return nil
}

// ErrOverrun is a peer sending more than the window it was given.
var ErrOverrun = errors.New("the peer sent more data than its window allows")

// Queue holds received data until its consumer takes it, at most limit bytes: a ring the
// socket's messages are read into and the consumer writes out from, so that a chunk of data
// costs no allocation and no copy beyond the two the kernel makes. Consecutive data of one
// stream is handed to the consumer as one stretch, whatever the messages it came in.
type Queue struct {
	mu         sync.Mutex
	limit      int64
	buf        []byte // the ring, allocated with the first data
	head, tail int64  // bytes taken and bytes put since the start; tail-head are queued
	runs       []run  // the stream of each stretch of the queued bytes, oldest first
	closed     bool
	ready      chan struct{} // has a value while data is queued or the queue is closed
}

// run is a stretch of queued bytes of one stream.
type run struct {
	id byte
	n  int64
}

// NewQueue returns a queue for a window of limit bytes.
func NewQueue(limit int64) *Queue {
	return &Queue{limit: max(limit, 1), ready: make(chan struct{}, 1)}
}

// ErrEnded is a peer sending data after the end of its stream.
var ErrEnded = errors.New("data after the end of the stream")

// Put queues a copy of b as stream id's data: ErrOverrun if that would exceed the limit.
func (q *Queue) Put(id byte, b []byte) error {
	_, err := q.ReadFrom(id, bytes.NewReader(b))
	return err
}

// ReadFrom reads r to its end into the queue as stream id's data (r is one message's payload)
// and returns how many bytes it queued. The peer's errors are ErrOverrun, once r holds more than
// the room left, and ErrEnded after Close; any other is r's. What it reads is handed to the
// consumer as it arrives.
func (q *Queue) ReadFrom(id byte, r io.Reader) (int64, error) {
	var total int64
	var probe [1]byte
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return total, ErrEnded
		}
		if q.buf == nil {
			q.buf = make([]byte, q.limit)
		}
		off := q.tail % q.limit
		span := min(q.limit-(q.tail-q.head), q.limit-off)
		p := q.buf[off : off+span]
		q.mu.Unlock()
		// Only this writer touches the ring beyond tail; the consumer reads below it.
		if span == 0 {
			p = probe[:] // full: any more data is the peer's overrun
		}
		n, err := r.Read(p)
		if n > 0 {
			if span == 0 {
				return total, ErrOverrun
			}
			q.put(id, int64(n))
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// put makes n bytes written beyond tail the consumer's.
func (q *Queue) put(id byte, n int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.tail += n
	if last := len(q.runs) - 1; last >= 0 && q.runs[last].id == id {
		q.runs[last].n += n
	} else {
		q.runs = append(q.runs, run{id, n})
	}
	q.signal()
}

// Close ends the stream: Drain returns once what is queued has been taken.
func (q *Queue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.signal()
}

func (q *Queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// get waits for queued data and returns the oldest stretch of one stream, at most most bytes
// and contiguous in the ring; io.EOF once the queue is closed and empty. The bytes stay the
// caller's until it releases them.
func (q *Queue) get(ctx context.Context, most int64) (id byte, b []byte, err error) {
	for {
		q.mu.Lock()
		if len(q.runs) > 0 {
			r := q.runs[0]
			off := q.head % q.limit
			b := q.buf[off : off+min(r.n, most, q.limit-off)]
			q.mu.Unlock()
			return r.id, b, nil
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return 0, nil, io.EOF
		}
		select {
		case <-q.ready:
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		}
	}
}

// release gives back the room of n bytes that get returned.
func (q *Queue) release(n int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.head += n
	if q.runs[0].n -= n; q.runs[0].n == 0 {
		q.runs[0] = run{}
		q.runs = q.runs[1:]
	}
}

// Drain hands the queued data to consume, in order, with the stream id it came with, and
// acknowledges the consumed bytes through ack each time a quarter of the window has been
// consumed: a sender that has spent its credit then has three quarters of the window queued or
// in flight, whose consumption brings the next ack, so it is never stuck, and acks cost one
// message per quarter window rather than one per chunk. consume gets at most an eighth of the
// window at a time, so that acks keep coming while it writes. Drain returns nil at the end of
// the stream, or the first error.
func Drain(ctx context.Context, q *Queue, consume func(id byte, b []byte) error, ack func(n int64) error) error {
	var pending int64
	quarter := max(q.limit/4, 1)
	for {
		id, b, err := q.get(ctx, max(q.limit/8, 1))
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := consume(id, b); err != nil {
			return err
		}
		q.release(int64(len(b)))
		pending += int64(len(b))
		if pending >= quarter {
			if err := ack(pending); err != nil {
				return err
			}
			pending = 0
		}
	}
}
