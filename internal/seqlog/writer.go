package seqlog

import "runtime"

// Writer is the single writer goroutine of a log: it stores what producers queue in batches,
// one transaction (and fsync) per batch, and serves operations (a deletion, a flush) in order
// with the records queued before them. The owner keeps its own queue, and with it its policy
// for a full one (drop, block, refuse), since that is what differs between logs; Writer keeps
// the loop: wait for a kick, an operation or Close, let woken producers join the batch, take,
// commit, and go on while something is left.
type Writer[T, Op any] struct {
	max    int
	take   func(batch []T, n int) ([]T, bool)
	commit func(batch []T, ops []Op)
	kick   chan struct{} // buffered: something is queued
	ops    chan Op
	quit   chan struct{} // closed by Close
	done   chan struct{} // closed when the goroutine has exited
}

// StartWriter starts the writer goroutine. take appends to batch up to n queued records,
// removing them from the owner's queue, and reports whether any are left; commit stores a
// batch and then runs ops, in one transaction, and answers each op. Both run on the writer
// goroutine only. maxBatch bounds the records of one commit.
func StartWriter[T, Op any](maxBatch int, take func(batch []T, n int) ([]T, bool), commit func(batch []T, ops []Op)) *Writer[T, Op] {
	w := &Writer[T, Op]{
		max:    maxBatch,
		take:   take,
		commit: commit,
		kick:   make(chan struct{}, 1),
		ops:    make(chan Op),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go w.run()
	return w
}

// Wake tells the writer something is queued; call it after queueing. It never blocks.
func (w *Writer[T, Op]) Wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Do hands op to the writer, which commits it after every record queued before it. It reports
// false, and does nothing, once the writer has exited.
func (w *Writer[T, Op]) Do(op Op) bool {
	select {
	case w.ops <- op:
		return true
	case <-w.done:
		return false
	}
}

// Done is closed when the writer has exited: after Close, once everything queued is stored.
func (w *Writer[T, Op]) Done() <-chan struct{} { return w.done }

// Close stores what is queued and stops the writer; it returns once it has exited. The owner
// stops queueing first (and calls Close once).
func (w *Writer[T, Op]) Close() {
	close(w.quit)
	<-w.done
}

func (w *Writer[T, Op]) run() {
	defer close(w.done)
	batch := make([]T, 0, w.max)
	for {
		var ops []Op
		quitting := false
		select {
		case <-w.kick:
		case op := <-w.ops:
			ops = append(ops, op)
		case <-w.quit:
			quitting = true
		}
		// Producers woken by the last commit are queueing again; let them join this batch.
		runtime.Gosched()
		var more bool
		batch, more = w.take(batch[:0], w.max)
		// An operation follows every record queued before it, and Close stores them all.
		for more && (len(ops) > 0 || quitting) {
			w.commit(batch, nil)
			batch, more = w.take(batch[:0], w.max)
		}
		w.commit(batch, ops)
		switch {
		case more:
			w.Wake() // the rest in the next batch
		case quitting:
			return
		}
	}
}
