package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// These tests drive the manager against fakes that count calls, without root.

// Every state pkg/api declares has a row in the machine, and every row and edge names one:
// admit refuses everything in a state without a row, Reconcile leaves it alone.
func TestEveryStateHasARow(t *testing.T) {
	states := api.SandboxStates()
	for _, s := range states {
		if _, ok := machine[s]; !ok {
			t.Errorf("state %s has no row in the state machine", s)
		}
	}
	for from, rule := range machine {
		if !slices.Contains(states, from) {
			t.Errorf("the state machine has a row for %s, which pkg/api does not declare", from)
		}
		for _, to := range rule.next {
			if !slices.Contains(states, to) {
				t.Errorf("the state machine has an edge from %s to %s, which pkg/api does not declare", from, to)
			}
		}
	}
}

// The outcomes of an operation in a state: it proceeds, it succeeds and changes nothing, or it
// is refused with an error code.
const (
	does   = "does"
	noop   = "noop"
	inval  = string(api.CodeInvalidState)
	notRun = string(api.CodeSandboxNotRunning)
)

// gone is the "state" of a sandbox whose record was removed.
const gone api.SandboxState = "(gone)"

// boxIn makes a durable 1 GiB sandbox "box" with a ready snapshot "snap" and leaves its record in
// state, as a daemon would find it: a container runs and the workspace is mounted in the states
// whose transition may have started one. It forgets the calls that took.
func (f *fakeManager) boxIn(t *testing.T, state api.SandboxState) store.Sandbox {
	t.Helper()
	ctx := context.Background()
	sb := mustCreate(t, f.Manager, api.SandboxesPost{Name: "box", Image: "minimal", NoStart: true, WorkspaceGiB: 1})
	if _, err := f.Snapshot(ctx, "box", api.SnapshotsPost{Name: "snap"}); err != nil {
		t.Fatal(err)
	}
	switch state {
	case api.StateStarting, api.StateRunning, api.StateStopping:
		f.rt.setRunning(sb.ID, true)
		f.vol.setMounted(sb.ID)
	}
	rec, err := f.store.UpdateSandbox("box", func(s *store.Sandbox) error {
		s.State = string(state)
		if state == api.StateFailed {
			s.Error = "boom"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f.calls.take()
	f.takeStopped()
	return rec
}

// stateOf returns the recorded state of "box", or gone.
func (f *fakeManager) stateOf(t *testing.T) api.SandboxState {
	t.Helper()
	rec, err := f.store.GetSandbox("box")
	if errors.Is(err, store.ErrNotFound) {
		return gone
	}
	if err != nil {
		t.Fatal(err)
	}
	return api.SandboxState(rec.State)
}

func wantCalls(t *testing.T, got, want map[string]int) {
	t.Helper()
	if want == nil {
		want = map[string]int{}
	}
	if !maps.Equal(got, want) {
		t.Errorf("calls = %v, want %v", got, want)
	}
}

// Every operation in every state: whether it proceeds, succeeds doing nothing, or is refused
// with which error; what it calls; where it leaves the sandbox.
func TestOperationInEveryState(t *testing.T) {
	ctx := context.Background()
	ops := []struct {
		name string
		do   func(*fakeManager) error
		// want is the outcome in each state, in api.SandboxStates order.
		want []string
		// calls are what the operation calls when it proceeds; a refusal or a no-op calls nothing.
		calls map[string]int
		// ends is where a proceeding operation leaves the sandbox; empty is where it was.
		ends api.SandboxState
		// refusal is the message of a refusal, with %s for the state.
		refusal string
	}{{
		name:    "start",
		do:      func(f *fakeManager) error { _, err := f.Start(ctx, "box"); return err },
		want:    []string{inval, does, inval, noop, inval, inval, does},
		calls:   map[string]int{"volume.Mount": 1, "runtime.Start": 1},
		ends:    api.StateRunning,
		refusal: `sandbox "box" is %s`,
	}, {
		name:    "stop",
		do:      func(f *fakeManager) error { _, err := f.Stop(ctx, "box"); return err },
		want:    []string{inval, noop, does, does, does, inval, does},
		calls:   map[string]int{"runtime.Stop": 1, "volume.Unmount": 1},
		ends:    api.StateStopped,
		refusal: `sandbox "box" is %s`,
	}, {
		name:  "delete",
		do:    func(f *fakeManager) error { return f.Delete(ctx, "box", false) },
		want:  []string{does, does, does, does, does, does, does},
		calls: map[string]int{"runtime.Stop": 1, "volume.Delete": 1, "runtime.RemoveLayer": 1},
		ends:  gone,
	}, {
		name: "exec",
		do: func(f *fakeManager) error {
			_, err := f.Exec(ctx, "box", runtime.ExecSpec{Argv: []string{"true"}})
			return err
		},
		want:    []string{notRun, notRun, notRun, does, notRun, notRun, notRun},
		calls:   map[string]int{"runtime.Exec": 1},
		refusal: "sandbox \"box\" is %s: start it with `hiloop sandbox start box`",
	}, {
		name:    "dial",
		do:      func(f *fakeManager) error { _, err := f.DialLoopback(ctx, "box", "127.0.0.1:80"); return err },
		want:    []string{notRun, notRun, notRun, does, notRun, notRun, notRun},
		calls:   map[string]int{"runtime.DialLoopback": 1},
		refusal: "sandbox \"box\" is %s: start it with `hiloop sandbox start box`",
	}, {
		name:    "grow",
		do:      func(f *fakeManager) error { _, err := f.Grow(ctx, "box", 2); return err },
		want:    []string{inval, does, inval, does, inval, inval, does},
		calls:   map[string]int{"volume.Grow": 1},
		refusal: `sandbox "box" is %s`,
	}, {
		name: "snapshot",
		do: func(f *fakeManager) error {
			_, err := f.Snapshot(ctx, "box", api.SnapshotsPost{Name: "s2"})
			return err
		},
		want:    []string{inval, does, inval, does, inval, inval, does},
		calls:   map[string]int{"volume.Snapshot": 1},
		refusal: `sandbox "box" is %s`,
	}, {
		name:    "restore",
		do:      func(f *fakeManager) error { _, err := f.Restore(ctx, "box", "snap"); return err },
		want:    []string{inval, does, inval, inval, inval, inval, inval},
		calls:   map[string]int{"volume.Restore": 1},
		refusal: "sandbox \"box\" is %s: stop it before restoring (`hiloop sandbox stop box`)",
	}}
	states := api.SandboxStates()
	for _, op := range ops {
		if len(op.want) != len(states) {
			t.Errorf("%s: %d outcomes for %d states %v", op.name, len(op.want), len(states), states)
			continue
		}
		for i, state := range states {
			want := op.want[i]
			t.Run(fmt.Sprintf("%s/%s", op.name, state), func(t *testing.T) {
				f := newFakeManager(t)
				f.boxIn(t, state)
				err := op.do(f)
				calls := f.calls.take()
				after := f.stateOf(t)
				switch want {
				case does:
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					wantCalls(t, calls, op.calls)
					ends := op.ends
					if ends == "" {
						ends = state
					}
					if after != ends {
						t.Errorf("left the sandbox %s, want %s", after, ends)
					}
				case noop:
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					wantCalls(t, calls, nil)
					if after != state {
						t.Errorf("left the sandbox %s, want it unchanged", after)
					}
				default:
					var apiErr *api.Error
					if !errors.As(err, &apiErr) || string(apiErr.Code) != want {
						t.Fatalf("got %v, want a refusal with %s", err, want)
					}
					if msg := fmt.Sprintf(op.refusal, state); apiErr.Message != msg {
						t.Errorf("refusal says %q, want %q", apiErr.Message, msg)
					}
					wantCalls(t, calls, nil)
					if after != state {
						t.Errorf("a refusal left the sandbox %s, want it unchanged", after)
					}
				}
			})
		}
	}
}

// A stop ends the sandbox's sessions once; a stop that finds it stopped, and a refused one, none.
func TestStopNotifiesOnce(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		state api.SandboxState
		want  []string
	}{
		{api.StateRunning, []string{"box"}},
		{api.StateStopped, nil},
		{api.StateDeleting, nil},
	} {
		t.Run(string(tc.state), func(t *testing.T) {
			f := newFakeManager(t)
			f.boxIn(t, tc.state)
			_, _ = f.Stop(ctx, "box")
			if got := f.takeStopped(); !slices.Equal(got, tc.want) {
				t.Errorf("stop notifications = %v, want %v", got, tc.want)
			}
		})
	}
}

// A sandbox recorded running whose init died reads as failed; a start cleans up, ends its
// sessions and starts it afresh; an exec meanwhile says it is not answering.
func TestStartRestartsADeadInit(t *testing.T) {
	ctx := context.Background()
	f := newFakeManager(t)
	rec := f.boxIn(t, api.StateRunning)
	f.rt.setRunning(rec.ID, false)

	if sb, err := f.Get(ctx, "box"); err != nil || sb.State != api.StateFailed {
		t.Fatalf("Get = %s, %v; want failed", sb.State, err)
	}
	_, err := f.Exec(ctx, "box", runtime.ExecSpec{Argv: []string{"true"}})
	wantCode(t, err, api.CodeSandboxNotRunning)
	if !strings.Contains(err.Error(), "is not answering") {
		t.Errorf("exec into a dead init: %v", err)
	}
	f.calls.take()

	sb, err := f.Start(ctx, "box")
	if err != nil || sb.State != api.StateRunning {
		t.Fatalf("Start = %s, %v", sb.State, err)
	}
	wantCalls(t, f.calls.take(), map[string]int{"runtime.Stop": 1, "volume.Unmount": 1, "volume.Mount": 1, "runtime.Start": 1})
	if got := f.takeStopped(); !slices.Equal(got, []string{"box"}) {
		t.Errorf("stop notifications = %v, want [box]", got)
	}
}

// Starting a running sandbox whose init lives but does not answer in time (starved by its own
// processes) changes nothing: it is not dead, and what runs in it stays.
func TestStartLeavesAnUnresponsiveSandboxRunning(t *testing.T) {
	ctx := context.Background()
	f := newFakeManager(t)
	f.boxIn(t, api.StateRunning)
	f.rt.probe = func(context.Context, string) runtime.Liveness { return runtime.Unresponsive }
	f.calls.take()

	sb, err := f.Start(ctx, "box")
	if err != nil || sb.State != api.StateRunning {
		t.Fatalf("Start = %s, %v; want running", sb.State, err)
	}
	wantCalls(t, f.calls.take(), nil)
	if got := f.takeStopped(); len(got) != 0 {
		t.Errorf("stop notifications = %v, want none", got)
	}
}

// A start the runtime fails is cleaned up and leaves the sandbox failed with the reason; the
// next start tries again.
func TestFailedStartLeavesSandboxFailed(t *testing.T) {
	ctx := context.Background()
	f := newFakeManager(t)
	f.boxIn(t, api.StateStopped)
	f.calls.failNext("runtime.Start", errors.New("no cgroup for you"))

	if _, err := f.Start(ctx, "box"); err == nil || !strings.Contains(err.Error(), "no cgroup for you") {
		t.Fatalf("Start = %v, want the runtime's error", err)
	}
	wantCalls(t, f.calls.take(), map[string]int{"volume.Mount": 1, "runtime.Start": 1, "runtime.Stop": 1, "volume.Unmount": 1})
	rec, err := f.store.GetSandbox("box")
	if err != nil || rec.State != string(api.StateFailed) || !strings.Contains(rec.Error, "no cgroup for you") {
		t.Fatalf("after a failed start: %s %q, %v", rec.State, rec.Error, err)
	}

	f.calls.failNext("runtime.Start", nil)
	if sb, err := f.Start(ctx, "box"); err != nil || sb.State != api.StateRunning || sb.Error != "" {
		t.Fatalf("Start after a failure = %s %q, %v", sb.State, sb.Error, err)
	}
}

// A stop the runtime fails leaves the sandbox failed; its sessions end all the same.
func TestFailedStopLeavesSandboxFailed(t *testing.T) {
	ctx := context.Background()
	f := newFakeManager(t)
	f.boxIn(t, api.StateRunning)
	f.calls.failNext("runtime.Stop", errors.New("stuck"))

	if _, err := f.Stop(ctx, "box"); err == nil || !strings.Contains(err.Error(), "stuck") {
		t.Fatalf("Stop = %v, want the runtime's error", err)
	}
	wantCalls(t, f.calls.take(), map[string]int{"runtime.Stop": 1})
	if got := f.stateOf(t); got != api.StateFailed {
		t.Errorf("after a failed stop: %s, want failed", got)
	}
	if got := f.takeStopped(); !slices.Equal(got, []string{"box"}) {
		t.Errorf("stop notifications = %v, want [box]", got)
	}
}

// Create makes the workspace the storage class asks for and starts the sandbox unless told not
// to; a create whose start fails leaves nothing behind.
func TestCreate(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		post      api.SandboxesPost
		startFail bool
		calls     map[string]int
		ends      api.SandboxState
	}{{
		name:  "durable",
		post:  api.SandboxesPost{Name: "new"},
		calls: map[string]int{"volume.Create": 1, "volume.Mount": 1, "runtime.Start": 1},
		ends:  api.StateRunning,
	}, {
		name:  "no start",
		post:  api.SandboxesPost{Name: "new", NoStart: true},
		calls: map[string]int{"volume.Create": 1},
		ends:  api.StateStopped,
	}, {
		name:  "ephemeral: the workspace is made at the start",
		post:  api.SandboxesPost{Name: "new", StorageClass: api.StorageEphemeral},
		calls: map[string]int{"volume.Create": 1, "volume.Mount": 1, "runtime.Start": 1},
		ends:  api.StateRunning,
	}, {
		name:  "ephemeral, no start: no workspace yet",
		post:  api.SandboxesPost{Name: "new", StorageClass: api.StorageEphemeral, NoStart: true},
		calls: nil,
		ends:  api.StateStopped,
	}, {
		name:  "fork",
		post:  api.SandboxesPost{Name: "new", FromSnapshot: "snap"},
		calls: map[string]int{"volume.CreateFromSnapshot": 1, "volume.Mount": 1, "runtime.Start": 1},
		ends:  api.StateRunning,
	}, {
		name:  "fork grown",
		post:  api.SandboxesPost{Name: "new", FromSnapshot: "snap", WorkspaceGiB: 3},
		calls: map[string]int{"volume.CreateFromSnapshot": 1, "volume.Grow": 1, "volume.Mount": 1, "runtime.Start": 1},
		ends:  api.StateRunning,
	}, {
		name:      "failed start",
		post:      api.SandboxesPost{Name: "new"},
		startFail: true,
		// The failed start's clean-up, then the create's: container, workspace, layers.
		calls: map[string]int{"volume.Create": 1, "volume.Mount": 1, "runtime.Start": 1, "runtime.Stop": 2, "volume.Unmount": 1, "volume.Delete": 1, "runtime.RemoveLayer": 1},
		ends:  gone,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeManager(t)
			f.boxIn(t, api.StateStopped) // the snapshot to fork from
			if tc.startFail {
				f.calls.failNext("runtime.Start", errors.New("no"))
			}
			p := tc.post
			p.Image = "minimal"
			if err := p.Normalize(); err != nil {
				t.Fatal(err)
			}
			_, err := f.Create(ctx, p)
			if tc.startFail != (err != nil) {
				t.Fatalf("Create: %v", err)
			}
			wantCalls(t, f.calls.take(), tc.calls)
			rec, err := f.store.GetSandbox("new")
			got := api.SandboxState(rec.State)
			if errors.Is(err, store.ErrNotFound) {
				got = gone
			}
			if got != tc.ends {
				t.Errorf("left the sandbox %s, want %s", got, tc.ends)
			}
		})
	}
}

// An ephemeral workspace goes at every stop.
func TestEphemeralStopDropsTheWorkspace(t *testing.T) {
	ctx := context.Background()
	f := newFakeManager(t)
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "box", Image: "minimal", StorageClass: api.StorageEphemeral})
	f.calls.take()
	if _, err := f.Stop(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, f.calls.take(), map[string]int{"runtime.Stop": 1, "volume.Delete": 1})
}

// Reconcile finishes or undoes what a crash cut short, by the state it finds.
func TestReconcileEveryState(t *testing.T) {
	restart := map[string]int{"runtime.Stop": 1, "volume.Unmount": 1, "volume.Mount": 1, "runtime.Start": 1}
	release := map[string]int{"runtime.Stop": 1, "volume.Unmount": 1}
	teardown := map[string]int{"runtime.Stop": 1, "volume.Delete": 1, "runtime.RemoveLayer": 1}
	cases := []struct {
		state        api.SandboxState
		dead         bool // the container did not survive the restart
		unresponsive bool // its init lives but does not answer
		fail         string
		calls        map[string]int
		ends         api.SandboxState
	}{
		{state: api.StateCreating, calls: teardown, ends: gone},
		{state: api.StateStopped, calls: release, ends: api.StateStopped},
		{state: api.StateStarting, calls: restart, ends: api.StateRunning},
		{state: api.StateRunning, calls: nil, ends: api.StateRunning},
		{state: api.StateRunning, dead: true, calls: restart, ends: api.StateRunning},
		// Alive but too busy to answer (its own processes starve its init): kept as it is.
		{state: api.StateRunning, unresponsive: true, calls: nil, ends: api.StateRunning},
		{state: api.StateStopping, calls: release, ends: api.StateStopped},
		{state: api.StateDeleting, calls: teardown, ends: gone},
		{state: api.StateFailed, calls: release, ends: api.StateFailed},
		// What the recovery fails leaves the sandbox failed.
		{state: api.StateStopped, fail: "volume.Unmount", calls: map[string]int{"runtime.Stop": 1, "volume.Unmount": 1}, ends: api.StateFailed},
		{state: api.StateRunning, dead: true, fail: "runtime.Start", calls: map[string]int{"runtime.Stop": 2, "volume.Unmount": 2, "volume.Mount": 1, "runtime.Start": 1}, ends: api.StateFailed},
		{state: api.StateStopping, fail: "runtime.Stop", calls: map[string]int{"runtime.Stop": 1}, ends: api.StateFailed},
		{state: api.StateDeleting, fail: "volume.Delete", calls: map[string]int{"runtime.Stop": 1, "volume.Delete": 1}, ends: api.StateFailed},
	}
	covered := map[api.SandboxState]bool{}
	for _, tc := range cases {
		covered[tc.state] = true
	}
	for _, state := range api.SandboxStates() {
		if !covered[state] {
			t.Errorf("no case reconciles a sandbox found %s", state)
		}
	}
	for _, tc := range cases {
		name := string(tc.state)
		if tc.dead {
			name += "/dead"
		}
		if tc.unresponsive {
			name += "/unresponsive"
		}
		if tc.fail != "" {
			name += "/" + tc.fail + " fails"
		}
		t.Run(name, func(t *testing.T) {
			f := newFakeManager(t)
			rec := f.boxIn(t, tc.state)
			if tc.dead {
				f.rt.setRunning(rec.ID, false)
			}
			if tc.unresponsive {
				f.rt.probe = func(context.Context, string) runtime.Liveness { return runtime.Unresponsive }
			}
			if tc.fail != "" {
				f.calls.failNext(tc.fail, errors.New("injected"))
			}
			if err := f.Reconcile(context.Background()); err != nil {
				t.Fatal(err)
			}
			wantCalls(t, f.calls.take(), tc.calls)
			if got := f.stateOf(t); got != tc.ends {
				t.Errorf("left the sandbox %s, want %s", got, tc.ends)
			}
		})
	}
}

// Reconcile waits on several sandboxes at once: each probe here returns only once all of them
// are in flight (or at its 2 s timeout), so one sandbox after another would leave them all
// unanswered. Each is kept running either way.
func TestReconcileProbesSandboxesAtOnce(t *testing.T) {
	f := newFakeManager(t)
	names := []string{"a", "b", "c", "d"}
	for _, n := range names {
		mustCreate(t, f.Manager, api.SandboxesPost{Name: n, Image: "minimal", WorkspaceGiB: 1})
	}
	var inFlight atomic.Int32
	all := make(chan struct{})
	var once sync.Once
	f.rt.probe = func(ctx context.Context, _ string) runtime.Liveness {
		defer inFlight.Add(-1)
		if inFlight.Add(1) == int32(len(names)) {
			once.Do(func() { close(all) })
		}
		select {
		case <-all:
			return runtime.Answering
		case <-ctx.Done():
			return runtime.Unresponsive
		}
	}
	f.calls.take()
	if err := f.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-all:
	default:
		t.Errorf("the %d probes never were in flight at once", len(names))
	}
	wantCalls(t, f.calls.take(), nil)
	for _, n := range names {
		if rec, err := f.store.GetSandbox(n); err != nil || rec.State != string(api.StateRunning) {
			t.Errorf("sandbox %s after the reconcile: %s, %v; want running", n, rec.State, err)
		}
	}
}

// A create whose client never got an answer is undone by a restart in whatever state it reached,
// so that the client's retry with its idempotency key makes the sandbox instead of finding its
// name taken; a create that returned leaves nothing marked.
func TestReconcileUndoesAnUnansweredCreate(t *testing.T) {
	teardown := map[string]int{"runtime.Stop": 1, "volume.Delete": 1, "runtime.RemoveLayer": 1}
	for _, state := range []api.SandboxState{api.StateStopped, api.StateStarting, api.StateRunning} {
		t.Run(string(state), func(t *testing.T) {
			f := newFakeManager(t)
			rec := f.boxIn(t, state)
			if rec.Unanswered {
				t.Fatal("a create that returned left its record marked unanswered")
			}
			if _, err := f.store.UpdateSandbox("box", func(s *store.Sandbox) error { s.Unanswered = true; return nil }); err != nil {
				t.Fatal(err)
			}
			if err := f.Reconcile(context.Background()); err != nil {
				t.Fatal(err)
			}
			wantCalls(t, f.calls.take(), teardown)
			if got := f.stateOf(t); got != gone {
				t.Errorf("left the sandbox %s, want it gone", got)
			}
		})
	}
}

// setState writes only a state the machine reaches from the current one.
func TestSetStateRefusesAnEdgeOutsideTheMachine(t *testing.T) {
	f := newFakeManager(t)
	rec := f.boxIn(t, api.StateStopped)
	if err := f.setState(&rec, api.StateRunning, ""); err == nil {
		t.Fatal("stopped → running was written")
	}
	if rec.State != string(api.StateStopped) {
		t.Errorf("the record in memory moved to %s", rec.State)
	}
	if got := f.stateOf(t); got != api.StateStopped {
		t.Errorf("the stored record moved to %s", got)
	}
}

// A sandbox in a state this daemon does not know (a newer daemon wrote it, then was downgraded)
// can be deleted and nothing else; Reconcile leaves it alone.
func TestAStateOutsideTheMachineCanBeDeleted(t *testing.T) {
	ctx := context.Background()
	const future api.SandboxState = "hibernating"
	if _, ok := machine[future]; ok {
		t.Fatalf("%s is in the machine: pick a state it does not know", future)
	}
	for _, tc := range []struct {
		name  string
		fail  string
		calls map[string]int
		ends  api.SandboxState
	}{
		{name: "delete", calls: map[string]int{"runtime.Stop": 1, "volume.Delete": 1, "runtime.RemoveLayer": 1}, ends: gone},
		// A delete that fails leaves the sandbox failed, where the machine takes over.
		{name: "failed delete", fail: "volume.Delete", calls: map[string]int{"runtime.Stop": 1, "volume.Delete": 1}, ends: api.StateFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeManager(t)
			rec := f.boxIn(t, future)
			f.rt.setRunning(rec.ID, true) // what the newer daemon left running goes with the delete
			f.vol.setMounted(rec.ID)

			if err := f.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			wantCalls(t, f.calls.take(), nil)
			if got := f.stateOf(t); got != future {
				t.Fatalf("Reconcile left the sandbox %s, want it %s", got, future)
			}
			_, err := f.Start(ctx, "box")
			wantCode(t, err, api.CodeInvalidState)
			_, err = f.Stop(ctx, "box")
			wantCode(t, err, api.CodeInvalidState)
			wantCalls(t, f.calls.take(), nil)

			if tc.fail != "" {
				f.calls.failNext(tc.fail, errors.New("injected"))
			}
			if err := f.Delete(ctx, "box", false); (err != nil) != (tc.fail != "") {
				t.Fatalf("Delete: %v", err)
			}
			wantCalls(t, f.calls.take(), tc.calls)
			if got := f.stateOf(t); got != tc.ends {
				t.Errorf("Delete left the sandbox %s, want %s", got, tc.ends)
			}
		})
	}
}

// builtImages is fakeImages whose "minimal" was last built at *built.
type builtImages struct{ built *time.Time }

func (b builtImages) Get(name string) (images.Image, error) {
	img, err := fakeImages{}.Get(name)
	img.Built = *b.built
	return img, err
}

// A running sandbox tells which build of its image it runs, and once the image is built again,
// that its next start takes the new build; stopped, it runs none.
func TestSandboxTellsTheImageBuildItRuns(t *testing.T) {
	ctx := context.Background()
	f := newFakeManager(t)
	first := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	built := first
	f.images = builtImages{&built}
	mustCreate(t, f.Manager, api.SandboxesPost{Name: "box", Image: "minimal", WorkspaceGiB: 1})
	look := func(why string, at *time.Time, rebuilt bool) {
		t.Helper()
		got, err := f.Get(ctx, "box")
		if err != nil {
			t.Fatal(err)
		}
		list, err := f.List(ctx)
		if err != nil || len(list) != 1 {
			t.Fatalf("list: %v %v", list, err)
		}
		for _, sb := range []api.Sandbox{got, list[0]} {
			if (sb.ImageBuiltAt == nil) != (at == nil) || at != nil && !sb.ImageBuiltAt.Equal(*at) || sb.ImageRebuilt != rebuilt {
				t.Errorf("%s: image built at %v, rebuilt %v; want %v, %v", why, sb.ImageBuiltAt, sb.ImageRebuilt, at, rebuilt)
			}
		}
	}
	look("started", &first, false)
	second := first.Add(time.Hour)
	built = second
	look("image built again", &first, true)
	if _, err := f.Stop(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	look("stopped", nil, false)
	if _, err := f.Start(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	look("started again", &second, false)
}
