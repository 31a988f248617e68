package seqlog

import (
	"slices"
	"strconv"
	"sync"
	"testing"
)

// queueLog is the smallest owner of a Writer: a slice for a queue, and a commit that records
// what it was given, in order.
type queueLog struct {
	mu      sync.Mutex
	queue   []int
	stored  []int    // what commit stored, in order
	served  []string // each op, with the records stored before it
	batches []int    // the size of each batch committed
	w       *Writer[int, string]
}

func newQueueLog(maxBatch int) *queueLog {
	l := &queueLog{}
	l.w = StartWriter(maxBatch, l.take, l.commit)
	return l
}

func (l *queueLog) add(v int) {
	l.mu.Lock()
	l.queue = append(l.queue, v)
	l.mu.Unlock()
	l.w.Wake()
}

func (l *queueLog) take(batch []int, n int) ([]int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := min(n, len(l.queue))
	batch = append(batch, l.queue[:k]...)
	l.queue = l.queue[k:]
	return batch, len(l.queue) > 0
}

func (l *queueLog) commit(batch []int, ops []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(batch) > 0 {
		l.batches = append(l.batches, len(batch))
	}
	l.stored = append(l.stored, batch...)
	for _, op := range ops {
		l.served = append(l.served, op+":"+strconv.Itoa(len(l.stored)))
	}
}

func TestWriterServesAnOpAfterTheRecordsBeforeIt(t *testing.T) {
	l := newQueueLog(3)
	l.mu.Lock() // queue all ten before the writer takes any
	l.queue = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	l.mu.Unlock()
	if !l.w.Do("op") {
		t.Fatal("Do refused while the writer runs")
	}
	l.w.Close()
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(l.stored, want) {
		t.Fatalf("stored %v, want %v", l.stored, want)
	}
	if want := []string{"op:10"}; !slices.Equal(l.served, want) {
		t.Fatalf("served %v, want %v: the op after the ten records queued before it", l.served, want)
	}
	for _, n := range l.batches {
		if n > 3 {
			t.Fatalf("batches %v: one over maxBatch 3", l.batches)
		}
	}
	if l.w.Do("late") {
		t.Fatal("Do accepted an op after Close")
	}
}

func TestWriterCloseStoresEverythingQueued(t *testing.T) {
	l := newQueueLog(4)
	for i := range 50 {
		l.add(i)
	}
	l.w.Close()
	if len(l.stored) != 50 || !slices.IsSorted(l.stored) {
		t.Fatalf("stored %v, want 0..49 in order", l.stored)
	}
	select {
	case <-l.w.Done():
	default:
		t.Fatal("Done is open after Close")
	}
}
