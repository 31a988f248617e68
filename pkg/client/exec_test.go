package client

import (
	"bytes"
	"net"
	"testing"
)

// writeCounter is a connection that records each write it is given.
type writeCounter struct {
	net.Conn
	writes [][]byte
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

// Between hold and release, the 4 KiB pieces the WebSocket library writes a masked frame in
// reach the connection as one write, after what was written before the hold and in order; a
// write made without a hold goes straight through.
func TestBatchConnGathersHeldWrites(t *testing.T) {
	w := &writeCounter{}
	b := &batchConn{Conn: w}
	if _, err := b.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	b.hold()
	var frame []byte
	for i := range 64 {
		piece := bytes.Repeat([]byte{byte(i)}, 4096)
		frame = append(frame, piece...)
		if n, err := b.Write(piece); n != len(piece) || err != nil {
			t.Fatalf("held write: %d, %v", n, err)
		}
	}
	if len(w.writes) != 1 {
		t.Fatalf("%d writes reached the connection during the hold, want only the one before", len(w.writes))
	}
	if err := b.release(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	if len(w.writes) != 3 || string(w.writes[0]) != "before" || !bytes.Equal(w.writes[1], frame) || string(w.writes[2]) != "after" {
		t.Fatalf("the connection got %d writes, want before, the frame whole, after", len(w.writes))
	}
	// A nil batch (no connection dialled through it) holds nothing and fails nothing.
	var none *batchConn
	none.hold()
	if err := none.release(); err != nil {
		t.Fatal(err)
	}
}
