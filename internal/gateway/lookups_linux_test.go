package gateway

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

// The lookups of all sandboxes share one bound: beyond it a lookup fails at once, and a slot
// frees when a lookup ends.
func TestBoundLookups(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	slow := func(ctx context.Context, host string) ([]netip.Addr, error) {
		started <- struct{}{}
		<-release
		return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil
	}
	lookup := boundLookups(slow, 2)
	done := make(chan error, 2)
	for range 2 {
		go func() { _, err := lookup(context.Background(), "a.example.test"); done <- err }()
	}
	<-started
	<-started
	if _, err := lookup(context.Background(), "b.example.test"); !errors.Is(err, errLookupsBusy) {
		t.Fatalf("a third lookup while two are in flight: %v", err)
	}
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if addrs, err := lookup(context.Background(), "c.example.test"); err != nil || len(addrs) != 1 {
		t.Fatalf("a lookup once the slots are free: %v %v", addrs, err)
	}
}
