// Package session is the session service: it owns every agent session, from its record to its
// end. It is the ACP client (github.com/coder/acp-go-sdk) of one harness process per sandbox and
// harness, the supervisor that starts and restarts those processes, and the permission broker.
// Every update a harness sends is stored in the session's event log (internal/eventlog) before
// anyone sees it; session and permission records live in the store. It follows the sandbox
// manager: a sandbox that stops stops its harnesses, one that is deleted takes its sessions with it.
//
// A turn: Prompt stores the prompt event and returns; a goroutine wakes the sandbox, starts or
// reuses the harness, makes the harness know the session (session/load, else session/resume,
// else session/new plus a notice), sends session/prompt and ends the turn with exactly one
// turn_end event (preceded by an error event when it failed).
package session

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hiloop/hiloop/internal/eventlog"
	"github.com/hiloop/hiloop/internal/harness"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

// Sandboxes is what sessions need of the sandbox manager.
type Sandboxes interface {
	Get(ctx context.Context, name string) (api.Sandbox, error)
	Start(ctx context.Context, name string) (api.Sandbox, error)
	Exec(ctx context.Context, name string, spec runtime.ExecSpec) (runtime.Process, error)
}

// Config wires a Service.
type Config struct {
	Store     *store.Store
	Log       *eventlog.Log
	Sandboxes Sandboxes
	// LogDir holds one harness log (the harnesses' stderr) per sandbox: <LogDir>/<sandbox>.log.
	LogDir string
	// Gateway is what harness adapters need to know of the egress gateway.
	Gateway harness.Env
	// Credentials gives each harness start the keys it presents to the model route (tokens
	// scoped to the sandbox and that start), and release, called once the harness has exited,
	// revokes them. nil: the adapters' fixed placeholders.
	Credentials func(sandboxID, sandbox, harness string) (keys harness.Keys, release func(), err error)
	// Images says which harnesses a sandbox's image carries; nil counts none.
	Images Images
	// Provided are the harnesses sandboxd provides in every sandbox whatever its image: "fake"
	// when it mounts the hiloop-fake-agent binary.
	Provided []string
	// Version is the daemon's version, sent to harnesses as the client's.
	Version string
	Logger  *slog.Logger
}

// Timeouts of the supervisor.
const (
	// initializeTimeout bounds a new harness's answer to initialize.
	initializeTimeout = 60 * time.Second
	// cancelGrace is how long a harness has to end a turn after session/cancel before it is
	// stopped.
	cancelGrace = 15 * time.Second
	// shutdownGrace is how long Close waits for running turns to record their end.
	shutdownGrace = 2 * time.Second
)

// Service owns every session.
type Service struct {
	cfg   Config
	store *store.Store
	log   *eventlog.Log
	boxes Sandboxes
	lg    *slog.Logger

	mu       sync.Mutex
	closing  bool
	turns    map[string]*turn         // session id → its running turn
	deleting map[string]bool          // sessions being deleted: no prompt may start
	procs    map[procKey]*harnessProc // live harness processes
	starts   map[procKey]*sync.Mutex  // one harness start at a time per key
	acp      map[acpKey]string        // a harness's session id in a sandbox → the session

	permMu  sync.Mutex                       // serializes permission decisions
	waiters map[string]chan store.Permission // permission key → the harness's waiting request
}

// New returns a Service. Call Recover before serving.
func New(cfg Config) *Service {
	s := &Service{
		cfg:      cfg,
		store:    cfg.Store,
		log:      cfg.Log,
		boxes:    cfg.Sandboxes,
		lg:       cfg.Logger,
		turns:    map[string]*turn{},
		deleting: map[string]bool{},
		procs:    map[procKey]*harnessProc{},
		starts:   map[procKey]*sync.Mutex{},
		acp:      map[acpKey]string{},
		waiters:  map[string]chan store.Permission{},
	}
	cfg.Log.OnFull(s.logFull)
	return s
}

// turn is a session's running turn.
type turn struct {
	session string
	sandbox string // the name of the session's sandbox
	policy  api.PermissionPolicy
	ctx     context.Context // ends when the turn is cancelled (or over)
	cancel  context.CancelFunc
	done    chan struct{} // closed once turn_end is stored and the session takes a prompt

	// Guarded by Service.mu.
	cancelled   bool
	stopped     bool   // a stop of the sandbox began after the prompt was accepted
	ending      bool   // turn_end is being recorded: no new permission request, a prompt waits
	waiting     int    // permission requests waiting for an operator
	budget      string // the notice of a spent token budget, once the route refused the turn
	routeFailed string // the notice of a request the route could not serve, once it failed
	logFull     string // the notice of a full event log, once the log refused the turn's events
}

// Recover finishes what the previous daemon left: sessions of sandboxes that are gone are
// deleted, and so are events no session owns and the harness logs of sandboxes that are gone (a
// delete's cascade that failed, or a delete that Reconcile finished); a turn that was running
// gets an error and a turn_end event; permission requests nobody answered are resolved as
// cancelled.
func (s *Service) Recover(ctx context.Context) error {
	recs, err := s.store.ListSessions()
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, rec := range recs {
		sb, err := s.boxes.Get(ctx, rec.Sandbox)
		if isCode(err, api.CodeSandboxNotFound) || err == nil && sb.ID != rec.SandboxID {
			s.lg.Info("deleting the session of a deleted sandbox", "session", rec.ID, "sandbox", rec.Sandbox)
			if err := s.deleteRecord(rec.ID); err != nil {
				return err
			}
			continue
		}
		known[rec.ID] = true
		if err := s.resolveUndecided(rec.ID, api.ResolvedByTurnEnd); err != nil {
			return err
		}
		open, err := s.log.TurnOpen(rec.ID)
		if err != nil {
			return err
		}
		if open {
			s.lg.Warn("ending the turn the daemon was running when it stopped", "session", rec.ID)
			s.log.Enqueue(rec.ID, api.EventError, mustJSON(api.ErrorData{
				Message: "sandboxd stopped while this turn ran, and the harness with it; prompt again to continue the session",
			}))
			if _, err := s.log.Append(rec.ID, api.EventTurnEnd, mustJSON(api.TurnEndData{StopReason: api.StopReasonError})); err != nil {
				return err
			}
		}
	}
	logged, err := s.log.Sessions()
	if err != nil {
		return err
	}
	for _, id := range logged {
		if !known[id] {
			s.lg.Info("deleting the events of a deleted session", "session", id)
			if err := s.log.DeleteSession(id); err != nil {
				return err
			}
		}
	}
	// A log left behind costs only disk: it is no reason to refuse to start.
	names, err := s.harnessLogSandboxes()
	if err != nil {
		s.lg.Warn("list the harness logs", "err", err)
	}
	for _, name := range names {
		if err := s.removeHarnessLogs(ctx, name); err != nil {
			s.lg.Warn("remove the harness log of a deleted sandbox", "sandbox", name, "err", err)
		}
	}
	return nil
}

// Close cancels running turns, stops every harness and gives the turns a moment to record how
// they ended. The log is the caller's to close afterwards.
func (s *Service) Close() {
	s.mu.Lock()
	s.closing = true
	procs := make([]*harnessProc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	turns := make([]*turn, 0, len(s.turns))
	for _, t := range s.turns {
		turns = append(turns, t)
		t.cancel()
	}
	s.mu.Unlock()
	for _, p := range procs {
		p.fail(errors.New("sandboxd is shutting down"))
	}
	deadline := time.After(shutdownGrace)
	for _, t := range turns {
		select {
		case <-t.done:
		case <-deadline:
			return
		}
	}
}

// Create creates a session on a sandbox, with the harness named or, for none, the first the
// sandbox has; one the sandbox lacks is harness_not_in_image. The harness starts with the first
// prompt. p.Sandbox is the sandbox's key (internal/identity): the session is its owner's.
func (s *Service) Create(ctx context.Context, p api.SessionsPost) (api.Session, error) {
	key := p.Sandbox
	_, p.Sandbox = identity.Split(key) // the name is checked, the namespace is the caller's
	err := p.Normalize()
	p.Sandbox = key
	if err != nil {
		return api.Session{}, err
	}
	if p.Harness != "" {
		if _, err := harness.Lookup(p.Harness); err != nil {
			return api.Session{}, api.Errorf(api.CodeHarnessNotFound, "%v", err)
		}
	}
	sb, err := s.boxes.Get(ctx, p.Sandbox)
	if err != nil {
		return api.Session{}, err
	}
	prev, made, err := s.madeBy(store.CallOf(ctx))
	if err != nil {
		return api.Session{}, err
	}
	if made {
		return s.view(ctx, prev, &sb)
	}
	name, err := s.pickHarness(sb, p.Harness)
	if err != nil {
		return api.Session{}, err
	}
	rec := store.Session{
		ID:        newID(),
		Sandbox:   sb.Name,
		SandboxID: sb.ID,
		Harness:   name,
		Cwd:       p.Cwd,
		Policy:    string(p.PermissionPolicy),
		CreatedAt: time.Now().UTC(),
		Call:      store.CallOf(ctx),
	}
	if err := s.store.CreateSession(rec); err != nil {
		return api.Session{}, err
	}
	return s.view(ctx, rec, &sb)
}

// madeBy returns the session that call made: a retry of a create that a crash kept from
// storing its receipt gets that session rather than a second one.
func (s *Service) madeBy(call store.Call) (store.Session, bool, error) {
	if call == "" {
		return store.Session{}, false, nil
	}
	recs, err := s.store.ListSessions()
	for _, rec := range recs {
		if call.Made(rec.Call) {
			return rec, true, nil
		}
	}
	return store.Session{}, false, err
}

// Get returns a session.
func (s *Service) Get(ctx context.Context, id string) (api.Session, error) {
	rec, err := s.record(id)
	if err != nil {
		return api.Session{}, err
	}
	return s.view(ctx, rec, nil)
}

// List returns every session, or a sandbox's when sandbox is not empty, oldest first.
func (s *Service) List(ctx context.Context, sandbox string) ([]api.Session, error) {
	if sandbox != "" {
		if _, err := s.boxes.Get(ctx, sandbox); err != nil {
			return nil, err
		}
	}
	recs, err := s.store.ListSessions()
	if err != nil {
		return nil, err
	}
	out := []api.Session{}
	for _, rec := range recs {
		if sandbox != "" && rec.Sandbox != sandbox {
			continue
		}
		v, err := s.view(ctx, rec, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Delete deletes an idle session with its events.
func (s *Service) Delete(ctx context.Context, id string) error {
	if _, err := s.record(id); err != nil {
		return err
	}
	return s.deleteSession(id, false)
}

// deleteSession deletes a session; a running turn is turn_in_progress, or with wait, waited for
// (its harness must be stopping). No prompt starts meanwhile.
func (s *Service) deleteSession(id string, wait bool) error {
	s.mu.Lock()
	t := s.turns[id]
	if t != nil && !wait {
		s.mu.Unlock()
		return api.Errorf(api.CodeTurnInProgress, "session %s has a turn running: cancel it first with `hiloop session cancel %s`", id, id)
	}
	s.deleting[id] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.deleting, id)
		s.mu.Unlock()
	}()
	if t != nil {
		<-t.done
	}
	s.forget(id)
	return s.deleteRecord(id)
}

// deleteRecord deletes the events, then the record: a crash in between leaves a session with no
// events, not events with no session (Recover deletes those too).
func (s *Service) deleteRecord(id string) error {
	if err := s.log.DeleteSession(id); err != nil {
		return err
	}
	return s.store.DeleteSession(id)
}

// forget drops the session from the harness processes that know it.
func (s *Service) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		p.forget(id)
	}
	for k, v := range s.acp {
		if v == id {
			delete(s.acp, k)
		}
	}
}

// acpKey is a harness's own id of a session in one sandbox.
type acpKey struct{ sandboxID, acpID string }

// HarnessSession returns the session of the sandbox sandboxID that its harness calls acpID
// (the id a harness sends with its model requests; for the three harnesses, their ACP session
// id), "" when none: the model route's attribution. It knows the sessions that had a turn
// since the daemon started, which are the only ones a harness can be making requests for.
func (s *Service) HarnessSession(sandboxID, acpID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acp[acpKey{sandboxID, acpID}]
}

// Notice puts a notice in a session's log.
func (s *Service) Notice(id, msg string) {
	s.log.Enqueue(id, api.EventNotice, mustJSON(api.NoticeData{Message: msg}))
}

// BudgetSpent tells a session that the model route refused its request because a token budget
// is spent (msg says which): a notice, once per turn however many requests the harness makes,
// and if the harness then fails the turn, its error says why before the harness's own words.
// A refusal outside a turn (a harness's late side request) is left to the next turn to tell.
func (s *Service) BudgetSpent(id, msg string) {
	s.turnNotice(id, func(t *turn) *string { return &t.budget }, msg)
}

// RouteFailed tells a session that the model route could not serve its request for a reason
// the harness does not show (msg says which: an unreachable provider, no usable login): a
// notice, once per turn, as harnesses retry such failures without a word.
func (s *Service) RouteFailed(id, msg string) {
	s.turnNotice(id, func(t *turn) *string { return &t.routeFailed }, msg)
}

// InSandbox calls tell with every session that has a turn running in the sandbox sandboxID:
// for a refusal the route could not attribute to a session (a harness's request that names
// none, or one before its turn's first), e.g. s.InSandbox(id, func(ses string) {
// s.RouteFailed(ses, msg) }).
func (s *Service) InSandbox(sandboxID string, tell func(session string)) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.turns))
	for id := range s.turns {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		if rec, err := s.store.GetSession(id); err == nil && rec.SandboxID == sandboxID {
			tell(id)
		}
	}
}

// turnNotice puts msg in the session's log as a notice if a turn is running that has not
// ended and whose field is still empty, and sets the field: one such notice a turn, never
// after its turn_end (endTurn sets ending under the same lock before it records the end).
func (s *Service) turnNotice(id string, field func(*turn) *string, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.turns[id]
	if t == nil || t.ending || *field(t) != "" {
		return
	}
	*field(t) = msg
	s.Notice(id, msg)
}

// logFull ends the running turn of a session whose log refused an event for a limit, with a
// notice that says so: the harness is cancelled rather than left to fill the disk. The next
// prompt is refused (fullError) until there is room.
func (s *Service) logFull(id string, full *eventlog.FullError) {
	rec, err := s.store.GetSession(id)
	if err != nil {
		return // deleted meanwhile
	}
	msg := fullMessage(rec, full) + "; this turn was stopped"
	s.turnNotice(id, func(t *turn) *string { return &t.logFull }, msg)
	if err := s.cancelTurn(id); err != nil {
		s.lg.Error("cancel the turn of a session whose event log is full", "session", id, "err", err)
	}
}

// fullMessage says which log is full and how to make room.
func fullMessage(rec store.Session, full *eventlog.FullError) string {
	if full.Sandbox != "" {
		return fmt.Sprintf("the event logs of sandbox %s's sessions are full (%s): delete the sessions you no longer need (`hiloop session delete ID`) or use another sandbox",
			displayName(rec.Sandbox), full.Measure())
	}
	return fmt.Sprintf("the event log of session %s is full (%s): start a new session (`hiloop session new %s`) and delete this one (`hiloop session delete %s`) to give its space back",
		rec.ID, full.Measure(), displayName(rec.Sandbox), rec.ID)
}

// fullError turns a log's refusal of a session's prompt into the API's session_log_full; any
// other error is returned as it is.
func fullError(rec store.Session, err error) error {
	var full *eventlog.FullError
	if errors.As(err, &full) {
		return api.Errorf(api.CodeSessionLogFull, "%s", fullMessage(rec, full))
	}
	return err
}

// Events returns up to limit stored events of a session after seq after.
func (s *Service) Events(id string, after uint64, limit int) ([]api.SessionEvent, error) {
	if _, err := s.record(id); err != nil {
		return nil, err
	}
	return s.log.Since(id, after, limit)
}

// Subscribe streams a session's events after seq after, then live ones. A cursor past the last
// event is invalid_argument: the watcher would skip what comes in between.
func (s *Service) Subscribe(id string, after uint64) (*eventlog.Subscription, error) {
	if _, err := s.record(id); err != nil {
		return nil, err
	}
	last, err := s.log.LastSeq(id)
	if err != nil {
		return nil, err
	}
	if after > last {
		return nil, api.Errorf(api.CodeInvalidArgument, "after=%d is past the last event of session %s (seq %d)", after, id, last)
	}
	return s.log.Subscribe(id, after), nil
}

// Prompt stores a prompt and starts its turn; it returns once the prompt event is durable. A
// prompt that arrives while the previous turn records its end waits for it.
func (s *Service) Prompt(ctx context.Context, id, text string) (api.PromptAccepted, error) {
	if strings.TrimSpace(text) == "" {
		return api.PromptAccepted{}, api.Errorf(api.CodeInvalidArgument, "the prompt is empty")
	}
	if len(text) > api.MaxPromptBytes {
		return api.PromptAccepted{}, api.Errorf(api.CodeInvalidArgument, "the prompt is %d bytes; the limit is %d", len(text), api.MaxPromptBytes)
	}
	if !utf8.ValidString(text) {
		return api.PromptAccepted{}, api.Errorf(api.CodeInvalidArgument, "the prompt is not valid UTF-8")
	}
	rec, err := s.record(id)
	if err != nil {
		return api.PromptAccepted{}, err
	}
	// A retry of a prompt whose event was stored before a crash lost its receipt: the prompt is
	// not stored twice, and its turn was ended by the restart.
	if seq, stored, err := s.log.CallSeq(id, string(store.CallOf(ctx))); err != nil || stored {
		return api.PromptAccepted{Seq: seq}, err
	}
	if err := s.log.Room(id, len(text)); err != nil {
		return api.PromptAccepted{}, fullError(rec, err)
	}
	policy, err := s.policy(ctx, rec)
	if err != nil {
		return api.PromptAccepted{}, err
	}
	t, pending, err := s.startTurn(ctx, rec, text, policy)
	if err != nil {
		return api.PromptAccepted{}, err
	}
	ev, err := pending.Wait()
	if err != nil {
		_ = s.log.TakeFailure(id) // told to the caller here, not to the next turn
		s.mu.Lock()
		delete(s.turns, id)
		s.mu.Unlock()
		t.cancel()
		close(t.done)
		return api.PromptAccepted{}, fullError(rec, err)
	}
	go s.runTurn(t, rec, text)
	return api.PromptAccepted{Seq: ev.Seq}, nil
}

// startTurn registers a new turn of session rec and queues its prompt event.
func (s *Service) startTurn(ctx context.Context, rec store.Session, text string, policy api.PermissionPolicy) (*turn, eventlog.Pending, error) {
	id := rec.ID
	s.mu.Lock()
	for {
		if s.closing {
			s.mu.Unlock()
			return nil, eventlog.Pending{}, api.Errorf(api.CodeUnavailable, "sandboxd is shutting down")
		}
		// A delete that began after the caller's lookup has marked the session or removed it.
		_, err := s.store.GetSession(id)
		if s.deleting[id] || errors.Is(err, store.ErrNotFound) {
			s.mu.Unlock()
			return nil, eventlog.Pending{}, api.Errorf(api.CodeSessionNotFound, "session %s not found: it was deleted", id)
		}
		if err != nil {
			s.mu.Unlock()
			return nil, eventlog.Pending{}, err
		}
		prev := s.turns[id]
		if prev == nil {
			break
		}
		if !prev.ending {
			s.mu.Unlock()
			return nil, eventlog.Pending{}, api.Errorf(api.CodeTurnInProgress, "session %s has a turn running: wait for its turn_end or cancel it with `hiloop session cancel %s`", id, id)
		}
		s.mu.Unlock()
		select {
		case <-prev.done:
		case <-ctx.Done():
			return nil, eventlog.Pending{}, ctx.Err()
		}
		s.mu.Lock()
	}
	tctx, cancel := context.WithCancel(context.Background())
	t := &turn{session: id, sandbox: rec.Sandbox, policy: policy, ctx: tctx, cancel: cancel, done: make(chan struct{})}
	s.turns[id] = t
	// Queued under the lock: the prompt lands after the previous turn's turn_end.
	pending := s.log.EnqueueCall(id, api.EventPrompt, mustJSON(api.PromptPost{Text: text}), string(store.CallOf(ctx)))
	s.mu.Unlock()
	return t, pending, nil
}

// Cancel cancels a session's running turn: a waiting permission request ends cancelled and the
// turn sends the harness session/cancel. Cancelling an idle session changes nothing.
func (s *Service) Cancel(ctx context.Context, id string) (api.Session, error) {
	rec, err := s.record(id)
	if err != nil {
		return api.Session{}, err
	}
	if err := s.cancelTurn(id); err != nil {
		return api.Session{}, err
	}
	return s.view(ctx, rec, nil)
}

// cancelTurn cancels a session's running turn, if it has one that is not cancelled already.
func (s *Service) cancelTurn(id string) (err error) {
	// Under permMu no permission request can be recorded, so the ones resolved here are the
	// cancelled turn's.
	s.permMu.Lock()
	s.mu.Lock()
	t := s.turns[id]
	first := t != nil && !t.cancelled && !t.ending
	if first {
		t.cancelled = true
		t.cancel() // drive sends session/cancel, and enforces it
	}
	s.mu.Unlock()
	if first {
		err = s.resolveUndecidedLocked(id, api.ResolvedByCancel)
	}
	s.permMu.Unlock()
	return err
}

// enforceCancel stops a harness that does not end a cancelled turn in time; the harness's other
// sessions' turns end too, told why.
func (s *Service) enforceCancel(t *turn, p *harnessProc) {
	timer := time.NewTimer(cancelGrace)
	defer timer.Stop()
	select {
	case <-t.done:
	case <-timer.C:
		p.fail(fmt.Errorf("harness %s was stopped: it did not end the cancelled turn of session %s within %s", p.key.harness, t.session, cancelGrace))
	}
}

// policy returns the permission policy in effect for a session.
func (s *Service) policy(ctx context.Context, rec store.Session) (api.PermissionPolicy, error) {
	if rec.Policy != "" {
		return api.PermissionPolicy(rec.Policy), nil
	}
	sb, err := s.boxes.Get(ctx, rec.Sandbox)
	if err != nil {
		return "", err
	}
	if sb.PermissionPolicy == "" {
		return api.PolicyAutoApprove, nil
	}
	return sb.PermissionPolicy, nil
}

// SandboxStopped stops the harnesses of a sandbox that stops; their turns end with an error. The
// sandbox manager calls it as a stop begins. A turn accepted before then that has not started
// the sandbox yet does not start it: the stop wins, and the turn ends with an error (a prompt
// accepted after the stop wakes the sandbox, as ever).
func (s *Service) SandboxStopped(name string) {
	s.mu.Lock()
	for _, t := range s.turns {
		if t.sandbox == name {
			t.stopped = true
		}
	}
	var procs []*harnessProc
	for k, p := range s.procs {
		if k.sandbox == name {
			procs = append(procs, p)
		}
	}
	s.mu.Unlock()
	for _, p := range procs {
		p.fail(fmt.Errorf("sandbox %s stopped", displayName(name)))
	}
}

// SandboxDeleted deletes the sessions of a deleted sandbox (name, id), with their events, and
// its harness logs. The sandbox manager calls it once the sandbox is gone and has stopped its
// harnesses already. The sandbox's delete succeeded whatever happens here, so a failure is
// logged and left to Recover, which deletes at the next start what is left of sandboxes that are
// gone.
func (s *Service) SandboxDeleted(name, id string) {
	if err := s.deleteSandbox(name, id); err != nil {
		s.lg.Error("delete the sessions of a deleted sandbox; the next start of sandboxd finishes it",
			"sandbox", name, "err", err)
	}
}

func (s *Service) deleteSandbox(name, id string) error {
	recs, err := s.store.ListSessions()
	if err != nil {
		return err
	}
	var errs []error
	for _, rec := range recs {
		if rec.SandboxID != id {
			continue // a sandbox made since under the same name keeps its sessions
		}
		if err := s.deleteSession(rec.ID, true); err != nil {
			errs = append(errs, err)
		}
	}
	s.mu.Lock()
	for k := range s.starts {
		if k.sandbox == name {
			delete(s.starts, k)
		}
	}
	s.mu.Unlock()
	return errors.Join(append(errs, s.removeHarnessLogs(context.Background(), name))...)
}

// removeHarnessLogs removes a sandbox's harness logs, unless a sandbox of that name exists (one
// made since the delete writes its own log there).
func (s *Service) removeHarnessLogs(ctx context.Context, name string) error {
	if _, err := s.boxes.Get(ctx, name); !isCode(err, api.CodeSandboxNotFound) {
		return err
	}
	for _, p := range []string{s.harnessLogPath(name), s.harnessLogPath(name) + ".1"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

func (s *Service) harnessLogPath(sandbox string) string {
	return filepath.Join(s.cfg.LogDir, sandbox+".log")
}

// harnessLogSandboxes lists the sandboxes that have a harness log.
func (s *Service) harnessLogSandboxes() ([]string, error) {
	entries, err := os.ReadDir(s.cfg.LogDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(strings.TrimSuffix(e.Name(), ".1"), ".log")
		if ok && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out, nil
}

func (s *Service) record(id string) (store.Session, error) {
	if err := api.ValidateSessionID(id); err != nil {
		return store.Session{}, err
	}
	rec, err := s.store.GetSession(id)
	if errors.Is(err, store.ErrNotFound) {
		return rec, api.Errorf(api.CodeSessionNotFound, "session %s not found: `hiloop session list` shows the sessions", id)
	}
	return rec, err
}

// view renders a session; sb is its sandbox if the caller has it already.
func (s *Service) view(ctx context.Context, rec store.Session, sb *api.Sandbox) (api.Session, error) {
	policy := api.PermissionPolicy(rec.Policy)
	if policy == "" && sb != nil {
		policy = sb.PermissionPolicy
	}
	if policy == "" {
		var err error
		if policy, err = s.policy(ctx, rec); err != nil {
			return api.Session{}, err
		}
	}
	last, err := s.log.LastSeq(rec.ID)
	if err != nil {
		return api.Session{}, err
	}
	state := api.SessionIdle
	s.mu.Lock()
	if t := s.turns[rec.ID]; t != nil {
		state = api.SessionRunning
		if t.waiting > 0 {
			state = api.SessionWaiting
		}
	}
	s.mu.Unlock()
	return api.Session{
		ID:               rec.ID,
		Sandbox:          rec.Sandbox,
		Harness:          rec.Harness,
		Cwd:              rec.Cwd,
		PermissionPolicy: policy,
		State:            state,
		LastSeq:          last,
		ACPSessionID:     rec.ACPSessionID,
		CreatedAt:        rec.CreatedAt,
	}, nil
}

func isCode(err error, code api.ErrorCode) bool {
	var apiErr *api.Error
	return errors.As(err, &apiErr) && apiErr.Code == code
}

// newID returns a session id: 12 random characters of [a-z0-9].
func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b[:])
}
