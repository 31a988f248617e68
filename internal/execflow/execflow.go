// Package execflow is the exec stream's flow control (pkg/api/exec.go): the credit a sender
// spends before it writes data, and the bounded queue a receiver fills from the socket and
// drains into a slow consumer, acknowledging what the consumer took. With both ends using it,
// neither ever blocks in a socket write for long, so keepalives pass however slow the data is.
package execflow

import (
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

// Queue holds received data until its consumer takes it, at most limit bytes.
type Queue struct {
	mu     sync.Mutex
	bufs   []queued
	size   int64
	limit  int64
	closed bool
	ready  chan struct{} // has a value while bufs is not empty or the queue is closed
}

// NewQueue returns a queue for a window of limit bytes.
func NewQueue(limit int64) *Queue {
	return &Queue{limit: limit, ready: make(chan struct{}, 1)}
}

type queued struct {
	b []byte
	n int64
}

// Put queues b, which the queue keeps, as n bytes of the window (a message's payload, without
// its stream id): ErrOverrun if that would exceed the limit.
func (q *Queue) Put(b []byte, n int64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return errors.New("data after the end of the stream")
	}
	if q.size+n > q.limit {
		return ErrOverrun
	}
	q.bufs = append(q.bufs, queued{b, n})
	q.size += n
	q.signal()
	return nil
}

// Close ends the stream: Get returns io.EOF once what is queued has been taken.
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

// Get waits for the next queued buffer and its size in the window; io.EOF once the queue is
// closed and empty.
func (q *Queue) Get(ctx context.Context) (b []byte, n int64, err error) {
	for {
		q.mu.Lock()
		if len(q.bufs) > 0 {
			e := q.bufs[0]
			q.bufs[0] = queued{}
			q.bufs = q.bufs[1:]
			q.size -= e.n
			if len(q.bufs) > 0 || q.closed {
				q.signal()
			}
			q.mu.Unlock()
			return e.b, e.n, nil
		}
		if q.closed {
			q.signal()
			q.mu.Unlock()
			return nil, 0, io.EOF
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// Drain hands every queued buffer to consume, in order, and acknowledges the consumed bytes
// through ack each time a quarter of the window has been consumed: a sender that has spent
// its credit then has three quarters of the window queued or in flight, whose consumption
// brings the next ack, so it is never stuck, and acks cost one message per quarter window
// rather than one per chunk. It returns nil at the end of the stream, or the first error.
func Drain(ctx context.Context, q *Queue, consume func([]byte) error, ack func(n int64) error) error {
	var pending int64
	for {
		b, n, err := q.Get(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := consume(b); err != nil {
			return err
		}
		pending += n
		if pending >= max(q.limit/4, 1) {
			if err := ack(pending); err != nil {
				return err
			}
			pending = 0
		}
	}
}
