package sandbox

import (
	"fmt"
	"slices"

	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// The sandbox state machine, as data: one row per state says what each operation does to a
// sandbox in that state, which states a transition out of it may write, and what Reconcile does
// with a sandbox a daemon start finds in it. Every operation asks admit before it acts, every
// state written goes through setState, which refuses an edge the row does not list, and
// Reconcile takes its recovery from the row: the switches live nowhere else. A state outside the
// table has the row unknownStateRule.
//
// Only the daemon writes states, one transition of a sandbox at a time (Manager.lock), and every
// transition ends in a resting state (stopped, running, failed) or removes the record. So an
// operation that takes the lock meets creating, starting, stopping or deleting only where a
// crash or a failed store write cut a transition short; the rows still say what happens there.
// Exec takes no lock and sees them while a transition runs: it is refused in all of them.

// operation is something a client asks of one sandbox.
type operation string

// The operations that depend on a sandbox's state.
const (
	opStart    operation = "start"
	opStop     operation = "stop"
	opDelete   operation = "delete"
	opExec     operation = "exec" // an exec, and a dial into the sandbox's loopback
	opGrow     operation = "grow"
	opSnapshot operation = "snapshot"
	opRestore  operation = "restore"
	opEgress   operation = "egress" // a change of the egress policy
)

// verdict is what an operation does to a sandbox in one state.
type verdict int

const (
	// refused is the zero value: an operation a row does not list is refused.
	refused verdict = iota
	// proceed does the operation.
	proceed
	// already succeeds and changes nothing: the sandbox is where the operation leads.
	already
	// alreadyIfLive is already while the sandbox's init runs; when it died, the sandbox is
	// cleaned up and the operation done afresh.
	alreadyIfLive
)

// recovery is what Reconcile does with a sandbox a daemon start finds in a state.
type recovery int

const (
	// reconcileRelease makes sure nothing of the sandbox runs or stays mounted.
	reconcileRelease recovery = iota + 1
	// reconcileUndoCreate removes what an interrupted create made, record included.
	reconcileUndoCreate
	// reconcileFinishDelete deletes the sandbox.
	reconcileFinishDelete
	// reconcileFinishStop stops the sandbox.
	reconcileFinishStop
	// reconcileRestart cleans up and starts the sandbox again.
	reconcileRestart
	// reconcileKeepIfLive leaves a sandbox whose init still runs (its workspace stays mounted
	// with it), else restarts it.
	reconcileKeepIfLive
)

// stateRule is one row of the state machine.
type stateRule struct {
	ops     map[operation]verdict
	next    []api.SandboxState
	recover recovery
}

// machine is the state machine. Delete proceeds in every state, and in one outside it
// (unknownStateRule): whatever is left is torn down.
var machine = map[api.SandboxState]stateRule{
	api.StateCreating: {
		ops:     map[operation]verdict{opDelete: proceed},
		next:    []api.SandboxState{api.StateStopped, api.StateDeleting},
		recover: reconcileUndoCreate,
	},
	api.StateStopped: {
		ops:  map[operation]verdict{opStart: proceed, opStop: already, opDelete: proceed, opGrow: proceed, opSnapshot: proceed, opRestore: proceed, opEgress: proceed},
		next: []api.SandboxState{api.StateStarting, api.StateDeleting, api.StateFailed},
		// Nothing of a stopped sandbox runs or stays mounted.
		recover: reconcileRelease,
	},
	api.StateStarting: {
		ops: map[operation]verdict{opStop: proceed, opDelete: proceed},
		// starting → starting: Reconcile starts an interrupted start again.
		next:    []api.SandboxState{api.StateRunning, api.StateFailed, api.StateStarting, api.StateStopping, api.StateDeleting},
		recover: reconcileRestart,
	},
	api.StateRunning: {
		ops: map[operation]verdict{opStart: alreadyIfLive, opStop: proceed, opDelete: proceed, opExec: proceed, opGrow: proceed, opSnapshot: proceed, opEgress: proceed},
		// running → starting: Reconcile restarts a sandbox whose init died with the daemon.
		next:    []api.SandboxState{api.StateStopping, api.StateStarting, api.StateDeleting, api.StateFailed},
		recover: reconcileKeepIfLive,
	},
	api.StateStopping: {
		ops:     map[operation]verdict{opStop: proceed, opDelete: proceed},
		next:    []api.SandboxState{api.StateStopped, api.StateFailed, api.StateStopping, api.StateDeleting},
		recover: reconcileFinishStop,
	},
	api.StateDeleting: {
		ops: map[operation]verdict{opDelete: proceed},
		// A finished delete removes the record; there is no state after it.
		next:    []api.SandboxState{api.StateDeleting, api.StateFailed},
		recover: reconcileFinishDelete,
	},
	api.StateFailed: {
		ops:     map[operation]verdict{opStart: proceed, opStop: proceed, opDelete: proceed, opGrow: proceed, opSnapshot: proceed, opEgress: proceed},
		next:    []api.SandboxState{api.StateStarting, api.StateStopping, api.StateDeleting, api.StateFailed},
		recover: reconcileRelease,
	},
}

// unknownStateRule is the row of every state outside the machine: one a newer daemon wrote before
// a downgrade. Nothing is known of what such a sandbox holds, so the only operation is delete
// (which tears down whatever is left, and may leave it failed), and Reconcile leaves it alone
// rather than guess at a recovery.
var unknownStateRule = stateRule{
	ops:  map[operation]verdict{opDelete: proceed},
	next: []api.SandboxState{api.StateDeleting},
}

// ruleOf returns the machine's row for state s.
func ruleOf(s api.SandboxState) stateRule {
	if rule, ok := machine[s]; ok {
		return rule
	}
	return unknownStateRule
}

// refusals words an operation's refusal where the plain invalid_state does not say enough.
var refusals = map[operation]func(rec store.Sandbox) error{
	opExec: notRunning,
	opRestore: func(rec store.Sandbox) error {
		return api.Errorf(api.CodeInvalidState, "sandbox %q is %s: stop it before restoring (`hiloop sandbox stop %s`)", displayName(rec.Name), rec.State, displayName(rec.Name))
	},
}

// admit returns what op does to rec in its current state, or the error that refuses it.
func admit(op operation, rec store.Sandbox) (verdict, error) {
	v := ruleOf(api.SandboxState(rec.State)).ops[op]
	if v != refused {
		return v, nil
	}
	if refuse, ok := refusals[op]; ok {
		return refused, refuse(rec)
	}
	return refused, api.Errorf(api.CodeInvalidState, "sandbox %q is %s", displayName(rec.Name), rec.State)
}

// checkTransition returns an error unless the machine has an edge from one state to another; a
// missing edge is a bug in the manager, never a client's mistake.
func checkTransition(rec store.Sandbox, to api.SandboxState) error {
	from := api.SandboxState(rec.State)
	if !slices.Contains(ruleOf(from).next, to) {
		return fmt.Errorf("sandbox %q: the state machine has no transition from %s to %s", displayName(rec.Name), from, to)
	}
	return nil
}
