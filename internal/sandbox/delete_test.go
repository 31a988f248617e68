package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/hiloop/hiloop/pkg/api"
)

// Delete tells its listeners the sandbox's name and id once, after the stop listeners and
// outside the sandbox's lock: the session service waits there for turns that may be starting
// the sandbox, which takes that lock.
func TestDeleteNotifiesOutsideTheLock(t *testing.T) {
	m, _ := newTestManager(t)
	ctx := context.Background()
	p := api.SandboxesPost{Name: "doomed", Image: "minimal", NoStart: true, WorkspaceGiB: 1}
	if err := p.Normalize(); err != nil {
		t.Fatal(err)
	}
	sb, err := m.Create(ctx, p)
	if err != nil {
		t.Fatal(err)
	}

	type call struct {
		name, id    string
		afterStop   bool
		startErr    error
		recordFound bool
	}
	stops := make(chan string, 4)
	m.OnStop(func(name string) { stops <- name })
	calls := make(chan call, 4)
	m.OnDelete(func(name, id string) {
		_, getErr := m.Get(ctx, name)
		_, startErr := m.Start(ctx, name) // takes the sandbox's lock
		calls <- call{name: name, id: id, afterStop: len(stops) > 0, startErr: startErr, recordFound: getErr == nil}
	})

	done := make(chan error, 1)
	go func() { done <- m.Delete(ctx, "doomed", false) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Delete: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Delete never returned: its listener is waiting for the sandbox's lock")
	}
	wantCode(t, m.Delete(ctx, "doomed", false), api.CodeSandboxNotFound)

	close(calls)
	var got []call
	for c := range calls {
		got = append(got, c)
	}
	if len(got) != 1 {
		t.Fatalf("%d delete notifications, want 1: %+v", len(got), got)
	}
	c := got[0]
	if c.name != "doomed" || c.id != sb.ID {
		t.Fatalf("notified (%q, %q), want (%q, %q)", c.name, c.id, "doomed", sb.ID)
	}
	if !c.afterStop {
		t.Fatal("notified of the delete before the stop")
	}
	if c.recordFound {
		t.Fatal("notified while the sandbox's record still exists")
	}
	wantCode(t, c.startErr, api.CodeSandboxNotFound)
}
