package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hiloop/hiloop/internal/tui"
	"github.com/hiloop/hiloop/internal/tui/chat"
	"github.com/hiloop/hiloop/internal/tui/picker"
	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// ChatOptions are the argument and flags of `hiloop chat`.
type ChatOptions struct {
	Sandbox string
	Session string // "" to pick one (or start one, with New)
	New     bool
	Harness string
	Policy  api.PermissionPolicy
	// Operator names the user in permission answers: user@host.
	Operator string
	// Trace, from HILOOP_CHAT_TRACE, is a file that gets a timestamped line per frame written
	// and per event batch received, for bench/chat.sh; "" for none.
	Trace string
}

func newCmdChat(f *Factory, runF func(*ChatOptions) error) *cobra.Command {
	opts := &ChatOptions{}
	cmd := &cobra.Command{
		Use:   "chat SANDBOX [--session ID | --new] [--harness NAME] [--policy ask|auto-approve]",
		Short: "Chat with a coding agent in a sandbox, full screen",
		Long: `Open a full-screen chat on a session of SANDBOX: the whole conversation so far, then the
agent's reply as it streams, its tool calls, plans and permission requests, which you answer
with a key press.

Without --session, a picker lists the sandbox's sessions (harness, last activity, first
prompt) and offers a new one; a sandbox without sessions gets a new one at once. --new starts
a new session, with --harness and --policy as ` + "`hiloop session new`" + ` takes them. A stopped
sandbox is started first; the status line follows the sandbox's state while the chat is open.

The conversation lives in the daemon: closing the chat leaves a running turn running, and a
dropped connection or a daemon restart shows "reconnecting" and picks up where it left off.
Any number of chats, ` + "`session events --follow`" + ` and ` + "`session approve`" + ` can watch and answer the
same session; answers carry your user@host. The chat needs a terminal; scripts use
` + "`hiloop session prompt`" + `.`,
		Example: `  hiloop chat web
  hiloop chat web --new --harness claude-code --policy ask
  hiloop chat web --session k3x9q2m7v4b8`,
		Args: exactArgs(1, "one SANDBOX name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Sandbox = args[0]
			if err := api.ValidateName("sandbox", opts.Sandbox); err != nil {
				return &usageError{err}
			}
			if opts.Session != "" {
				if opts.New {
					return &usageError{errors.New("--session and --new exclude each other: open a session or start one")}
				}
				if cmd.Flags().Changed("harness") || cmd.Flags().Changed("policy") {
					return &usageError{errors.New("--harness and --policy apply to a new session, not to --session")}
				}
				if err := api.ValidateSessionID(opts.Session); err != nil {
					return err
				}
			}
			if err := api.ValidatePolicy("--policy", opts.Policy); err != nil {
				return &usageError{err}
			}
			opts.Operator = defaultOperator()
			opts.Trace = os.Getenv("HILOOP_CHAT_TRACE")
			return runCommand(cmd, f, opts, runF, chatRun)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Session, "session", "", "open this session (default: pick one)")
	fl.BoolVar(&opts.New, "new", false, "start a new session")
	fl.StringVar(&opts.Harness, "harness", "", "a new session's harness: claude-code, codex, opencode or fake (default: the first the sandbox's image carries)")
	fl.StringVar((*string)(&opts.Policy), "policy", "", "a new session's permission policy: auto-approve or ask (default: the sandbox's)")
	return cmd
}

// defaultOperator is who answers permission requests from this CLI: user@host, cut to what
// the API accepts.
func defaultOperator() string {
	name := cmp.Or(os.Getenv("USER"), os.Getenv("USERNAME"))
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	s := strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, cmp.Or(name, "unknown")+"@"+cmp.Or(host, "localhost"))
	for len(s) > api.MaxOperatorBytes {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// errNotATerminal sends scripts to the command made for them.
var errNotATerminal = &usageError{errors.New("hiloop chat needs a terminal on stdin and stdout; " +
	"in a script, send a prompt with `hiloop session prompt SESSION TEXT` and follow a session with `hiloop session events SESSION --follow`")}

func chatRun(ctx context.Context, f *Factory, opts *ChatOptions) error {
	if !f.IO.IsStdinTTY() || !f.IO.IsStdoutTTY() {
		return errNotATerminal
	}
	c, err := f.Client()
	if err != nil {
		return err
	}
	box, err := c.GetSandbox(ctx, opts.Sandbox)
	if err != nil {
		return err
	}
	var se api.Session
	switch {
	case opts.Session != "":
		if se, err = c.GetSession(ctx, opts.Session); err != nil {
			return err
		}
		if se.Sandbox != opts.Sandbox {
			return &usageError{fmt.Errorf("session %s belongs to sandbox %s, not %s: `hiloop chat %s --session %s` opens it", se.ID, se.Sandbox, opts.Sandbox, se.Sandbox, se.ID)}
		}
	case !opts.New:
		id, quit, err := pickSession(ctx, f, c, opts.Sandbox)
		if err != nil || quit {
			return err
		}
		if id != "" {
			if se, err = c.GetSession(ctx, id); err != nil {
				return err
			}
		}
	}
	if se.ID == "" {
		se, err = c.CreateSession(ctx, api.SessionsPost{Sandbox: opts.Sandbox, Harness: opts.Harness, PermissionPolicy: opts.Policy})
		if err != nil {
			return err
		}
	}
	return runChat(ctx, f, c, opts, box, se)
}

// pickSession lists the sandbox's sessions in the picker and returns the one chosen, "" for a
// new one (also when there are none), or quit.
func pickSession(ctx context.Context, f *Factory, c *client.Client, sandbox string) (id string, quit bool, _ error) {
	list, err := c.ListSessions(ctx, sandbox)
	if err != nil || len(list) == 0 {
		return "", false, err
	}
	type row struct {
		item picker.Item
		at   time.Time
	}
	rows := make([]row, 0, len(list))
	for _, s := range list {
		at, first := sessionSummary(ctx, c, s)
		rows = append(rows, row{picker.Item{ID: s.ID, Harness: s.Harness, LastActivity: age(at) + " ago", FirstPrompt: first}, at})
	}
	slices.SortStableFunc(rows, func(a, b row) int { return b.at.Compare(a.at) })
	items := make([]picker.Item, len(rows))
	for i, r := range rows {
		items[i] = r.item
	}
	m := picker.New(sandbox, items)
	if _, err := runTUI(f, tea.NewProgram(m, tea.WithContext(ctx), tea.WithInput(f.IO.In), tea.WithOutput(f.IO.Out)), m.Quitter()); err != nil {
		return "", false, fmt.Errorf("session picker: %w", err)
	}
	ch := m.Choice()
	return ch.Session, ch.Quit, nil
}

// sessionSummary returns when a session last did something and its first prompt on one line;
// what cannot be read is left out of a list that is only a menu.
func sessionSummary(ctx context.Context, c *client.Client, s api.Session) (time.Time, string) {
	at := s.CreatedAt
	if s.LastSeq > 0 {
		if last, err := c.Events(ctx, s.ID, s.LastSeq-1, 1); err == nil && len(last) == 1 {
			at = last[0].Time
		}
	}
	// The first prompt is the first event unless the daemon noted something before it.
	first, _ := c.Events(ctx, s.ID, 0, 5)
	for _, ev := range first {
		if ev.Type == api.EventPrompt {
			var p api.PromptPost
			if json.Unmarshal(ev.Data, &p) == nil {
				return at, strings.Join(strings.Fields(p.Text), " ")
			}
		}
	}
	return at, ""
}

// runChat runs the chat model on the session with its driver until the user quits.
func runChat(ctx context.Context, f *Factory, c *client.Client, opts *ChatOptions, box api.Sandbox, se api.Session) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := f.IO.Out
	var trace *chatTrace
	if opts.Trace != "" {
		var err error
		if trace, err = openChatTrace(opts.Trace, out); err != nil {
			return err
		}
		defer trace.Close()
		trace.mark("start")
		out = trace
	}
	d := &chatDriver{c: c, session: se.ID, known: se.LastSeq, trace: trace,
		sandbox: opts.Sandbox, sandboxID: box.ID, state: box.State, pollNow: make(chan struct{}, 1)}
	m := chat.New(chat.Options{
		Sandbox:      opts.Sandbox,
		SandboxState: string(box.State),
		Session:      se,
		Backend:      &chatBackend{c: c, session: se.ID, operator: opts.Operator, prompted: d.pollSandbox},
		Colour:       f.IO.ColorEnabled(),
	})
	p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithInput(f.IO.In), tea.WithOutput(out))
	d.send = p.Send
	var driverErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		defer func() {
			// The program must end so that it gives the terminal back.
			if r := recover(); r != nil {
				driverErr = fmt.Errorf("chat driver panicked: %v\n%s", r, debug.Stack())
				p.Kill()
			}
		}()
		d.run(ctx)
	})
	_, err := runTUI(f, p, m.Quitter())
	cancel()
	// The user has quit: give the driver a moment to end its calls, but never let one that
	// does not hold the terminal after the screen is gone.
	driverDone := make(chan struct{})
	go func() { wg.Wait(); close(driverDone) }()
	select {
	case <-driverDone:
	case <-time.After(driverGrace):
	}
	switch {
	case driverErr != nil:
		return driverErr
	case errors.Is(err, tea.ErrProgramPanic):
		return &exitMessage{code: ExitError, msg: "hiloop: the chat crashed (the trace is above); the session goes on in the daemon"}
	case err != nil && ctx.Err() == nil:
		return fmt.Errorf("chat: %w", err)
	}
	return nil
}

// runTUI runs a full-screen program on the terminal of f. If the program does not end once its
// model quit (tui.ErrStuck), it gives the terminal back itself: the mode it found, the main
// screen, a visible cursor.
func runTUI(f *Factory, p *tea.Program, q *tui.Quitter) (tea.Model, error) {
	var restore func()
	if in, ok := f.IO.In.(interface{ Fd() uintptr }); ok {
		if state, err := term.GetState(int(in.Fd())); err == nil {
			restore = func() { _ = term.Restore(int(in.Fd()), state) }
		}
	}
	m, err := tui.Run(p, q, tui.QuitGrace)
	if errors.Is(err, tui.ErrStuck) {
		if restore != nil {
			restore()
		}
		_, _ = io.WriteString(f.IO.Out, ansi.ResetModeAltScreenSaveCursor+ansi.SetModeTextCursorEnable) // leave the alternate screen, show the cursor
		return m, nil
	}
	return m, err
}

// driverGrace bounds how long a chat that the user quit waits for its driver's calls.
const driverGrace = 2 * time.Second

// chatBackend does what the user asks of the session in the chat, through the API.
type chatBackend struct {
	c        *client.Client
	session  string
	operator string
	prompted func() // after a prompt was accepted: it wakes a stopped sandbox
}

func (b *chatBackend) Prompt(ctx context.Context, text string) error {
	_, err := b.c.Prompt(ctx, b.session, api.PromptPost{Text: text})
	if err == nil && b.prompted != nil {
		b.prompted()
	}
	return busyHint(err, b.session)
}

func (b *chatBackend) Cancel(ctx context.Context) error {
	_, err := b.c.CancelSession(ctx, b.session)
	return err
}

func (b *chatBackend) Answer(ctx context.Context, toolCallID, kind string) error {
	_, err := b.c.AnswerPermission(ctx, b.session, toolCallID, api.PermissionAnswer{Kind: kind, Operator: b.operator})
	return err
}

// chatDriver feeds the chat model a session's events: the stored history by pages, then the
// live stream, across dropped connections and daemon restarts, with the connection's state,
// refreshed sessions and the sandbox's state along the way.
type chatDriver struct {
	c       *client.Client
	session string
	known   uint64        // the session's last seq when the chat opened: its history to fetch ahead
	send    func(tea.Msg) // tea.Program.Send
	trace   *chatTrace    // nil unless tracing

	// The session's sandbox, whose state the status line follows ("" for none), its id (another
	// sandbox by the same name is not it) and its state as the chat opened: a stopped one is
	// started first.
	sandbox, sandboxID string
	state              api.SandboxState
	// pollNow asks for the sandbox's state at once (pollSandbox); nil for never.
	pollNow chan struct{}

	// backoff bounds the retries while the daemon is away (defaults: 100ms to 2s).
	backoffMin, backoffMax time.Duration
	// sandboxPoll is how often the sandbox's state is read (default 2s; a quarter of it while
	// the sandbox starts or stops).
	sandboxPoll time.Duration
}

// run feeds the model until ctx ends, or the session is gone and so is the sandbox it follows.
func (d *chatDriver) run(ctx context.Context) {
	d.backoffMin = cmp.Or(d.backoffMin, 100*time.Millisecond)
	d.backoffMax = cmp.Or(d.backoffMax, 2*time.Second)
	d.sandboxPoll = cmp.Or(d.sandboxPoll, 2*time.Second)
	d.send(chat.ConnMsg{State: chat.ConnLoading})
	if d.sandbox != "" {
		state := d.state
		if state == api.StateStopped {
			// The first prompt would start it too, but silently and only then: start it now,
			// on the status line. A start that fails is shown; the history can be read all
			// the same.
			d.send(chat.SandboxMsg{State: string(api.StateStarting)})
			box, err := d.c.StartSandbox(ctx, d.sandbox)
			if err != nil {
				d.send(chat.SandboxMsg{State: string(api.StateStopped), Err: err})
			} else {
				state = box.State
				d.send(chat.SandboxMsg{State: string(state)})
			}
		}
		var watch sync.WaitGroup
		defer watch.Wait()
		watch.Go(func() { d.watchSandbox(ctx, state) })
	}
	last, ok := d.replay(ctx)
	if !ok {
		return
	}
	d.send(chat.HistoryDoneMsg{})
	d.trace.mark("history_done")
	d.follow(ctx, last)
}

// retry waits before the next attempt after err, telling the model once per outage; it returns
// false when ctx ended or err is one no retry mends (the session is gone).
func (d *chatDriver) retry(ctx context.Context, err error, backoff *time.Duration, reported *bool) bool {
	if ctx.Err() != nil {
		return false
	}
	var apiErr *api.Error
	if errors.As(err, &apiErr) && apiErr.Code == api.CodeSessionNotFound {
		d.send(chat.ConnMsg{State: chat.ConnClosed, Err: err})
		return false
	}
	if !*reported {
		*reported = true
		d.send(chat.ConnMsg{State: chat.ConnReconnecting, Err: err})
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(*backoff):
	}
	*backoff = min(2**backoff, d.backoffMax)
	return true
}

// replay sends the stored events a page at a time and returns the last seq sent: the known
// history fetched ahead, then a page at a time what came since (or what fetching ahead missed).
func (d *chatDriver) replay(ctx context.Context) (last uint64, ok bool) {
	last = d.fetchAhead(ctx)
	backoff, reported := d.backoffMin, false
	for {
		page, err := d.c.Events(ctx, d.session, last, api.MaxEventsPage)
		if err != nil {
			if !d.retry(ctx, err, &backoff, &reported) {
				return last, false
			}
			continue
		}
		backoff = d.backoffMin
		if reported {
			reported = false
			d.send(chat.ConnMsg{State: chat.ConnLoading})
		}
		// A page short of api.MaxEventsPage may have been cut for its bytes: only an empty one
		// is the end.
		if len(page) == 0 {
			return last, true
		}
		d.send(chat.EventsMsg(page))
		d.trace.events(page)
		last = page[len(page)-1].Seq
	}
}

// pagesAhead is how many pages of history are fetched while the model takes the one before.
const pagesAhead = 2

// fetchAhead sends the pages of the known history and returns the last seq sent. A session's
// events are numbered without holes, so where each page starts is known before the page before
// it arrives: pages are fetched and decoded pagesAhead at a time while the model takes the
// previous one, which keeps a second core busy on a long session. A failed or surprising page
// ends it early and replay's page-at-a-time loop, with its retries, carries on from there.
func (d *chatDriver) fetchAhead(ctx context.Context) (last uint64) {
	type result struct {
		page []api.SessionEvent
		err  error
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // before Wait: it frees a fetcher blocked on a full queue
	queue := make(chan chan result, pagesAhead-1)
	wg.Go(func() {
		defer close(queue)
		for after := uint64(0); after < d.known; after += api.MaxEventsPage {
			r := make(chan result, 1)
			select {
			case queue <- r:
			case <-ctx.Done():
				return
			}
			wg.Go(func() {
				page, err := d.c.Events(ctx, d.session, after, api.MaxEventsPage)
				r <- result{page, err}
			})
		}
	})
	for r := range queue {
		res := <-r
		if res.err != nil || len(res.page) == 0 || res.page[0].Seq != last+1 {
			return last
		}
		d.send(chat.EventsMsg(res.page))
		d.trace.events(res.page)
		last = res.page[len(res.page)-1].Seq
		if len(res.page) < api.MaxEventsPage {
			return last // the end, or a page cut for its bytes: replay reads on from last
		}
	}
	return last
}

// follow streams live events after last until ctx ends or the session is gone. Events are sent
// to the model in batches: whatever arrived while the model took the previous batch, so that a
// chatty turn costs one update per frame or so, not one per event.
func (d *chatDriver) follow(ctx context.Context, last uint64) {
	var (
		mu      sync.Mutex
		pending []api.SessionEvent
		wake    = make(chan struct{}, 1)
	)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var senders sync.WaitGroup
	defer senders.Wait()
	senders.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
			mu.Lock()
			batch := pending
			pending = nil
			mu.Unlock()
			if len(batch) == 0 {
				continue
			}
			d.send(chat.EventsMsg(batch))
			d.trace.events(batch)
			if slices.ContainsFunc(batch, func(ev api.SessionEvent) bool {
				return ev.Type == api.EventTurnEnd || ev.Type == api.EventNotice
			}) {
				d.refresh(ctx)
			}
		}
	})
	take := func(ev api.SessionEvent) error {
		mu.Lock()
		pending = append(pending, ev)
		last = ev.Seq
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
		return nil
	}
	connected := func() {
		d.send(chat.ConnMsg{State: chat.ConnLive})
		d.refresh(ctx) // the session and its sandbox may have moved on while the connection was down
	}
	lost := func(err error) { d.send(chat.ConnMsg{State: chat.ConnReconnecting, Err: err}) }

	backoff, reported := d.backoffMin, false
	for {
		mu.Lock()
		after := last
		mu.Unlock()
		// Stream reconnects on its own once it has connected; only a first connection that
		// fails (the daemon is still away) comes back here.
		err := d.c.Stream(ctx, d.session, after, take, client.OnStreamConnected(func() {
			backoff, reported = d.backoffMin, false
			connected()
		}), client.OnStreamLost(lost))
		if err == nil || !d.retry(ctx, err, &backoff, &reported) {
			return
		}
	}
}

// refresh sends the session as the daemon now reports it (state, usage, budget), and has the
// sandbox's state read again: a turn's end or a notice may come from a sandbox that stopped.
func (d *chatDriver) refresh(ctx context.Context) {
	d.pollSandbox()
	se, err := d.c.GetSession(ctx, d.session)
	if err == nil {
		d.send(chat.SessionMsg(se))
	}
}

// pollSandbox has watchSandbox read the sandbox's state now rather than at its next turn.
func (d *chatDriver) pollSandbox() {
	select {
	case d.pollNow <- struct{}{}:
	default: // a read is asked for already
	}
}

// sandboxTimeout bounds one read of the sandbox's state: a daemon that does not answer delays
// the next read, never the chat.
const sandboxTimeout = 10 * time.Second

// watchSandbox keeps the status line on the sandbox's state, which changes under the chat (a
// stop, the start a prompt causes, a failure): there is no stream of it, so it reads the
// sandbox every sandboxPoll, more often while it starts or stops, and at once when asked (a
// reconnect, a prompt accepted, a turn's end). It sends a state when it changed from shown,
// chat.SandboxDeleted when the sandbox is gone, and ends then or when ctx does. A daemon away
// is the connection's state to show, not the sandbox's.
func (d *chatDriver) watchSandbox(ctx context.Context, shown api.SandboxState) {
	for {
		every := d.sandboxPoll
		if shown != api.StateRunning && shown != api.StateStopped && shown != api.StateFailed {
			every /= 4
		}
		select {
		case <-ctx.Done():
			return
		case <-d.pollNow:
		case <-time.After(every):
		}
		rctx, cancel := context.WithTimeout(ctx, sandboxTimeout)
		box, err := d.c.GetSandbox(rctx, d.sandbox)
		cancel()
		var apiErr *api.Error
		switch {
		case errors.As(err, &apiErr) && apiErr.Code == api.CodeSandboxNotFound,
			err == nil && d.sandboxID != "" && box.ID != d.sandboxID:
			d.send(chat.SandboxMsg{State: chat.SandboxDeleted})
			return
		case err != nil:
		case box.State != shown:
			shown = box.State
			d.send(chat.SandboxMsg{State: string(shown)})
		}
	}
}

// chatTrace is HILOOP_CHAT_TRACE: it wraps the terminal and notes, one line each with the time
// in nanoseconds, the chat's start ("start"), every frame written ("frame BYTES"), every batch
// of events sent to the model ("events N LASTSEQ [turn_end]") and the end of the history
// ("history_done"). It is still the terminal to bubbletea (Fd, Read), or it would not draw.
type chatTrace struct {
	mu  sync.Mutex
	tty *os.File
	f   *os.File
}

func openChatTrace(path string, out io.Writer) (*chatTrace, error) {
	tty, ok := out.(*os.File)
	if !ok {
		return nil, errNotATerminal
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("HILOOP_CHAT_TRACE: %w", err)
	}
	return &chatTrace{tty: tty, f: f}, nil
}

func (t *chatTrace) Write(p []byte) (int, error) {
	n, err := t.tty.Write(p)
	t.note(fmt.Sprintf("frame %d", n))
	return n, err
}

func (t *chatTrace) Read(p []byte) (int, error) { return t.tty.Read(p) }
func (t *chatTrace) Fd() uintptr                { return t.tty.Fd() }

// Close closes the trace file; the terminal stays the process's.
func (t *chatTrace) Close() error { return t.f.Close() }

func (t *chatTrace) note(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.f, "%d %s\n", time.Now().UnixNano(), s)
}

func (t *chatTrace) mark(s string) {
	if t != nil {
		t.note(s)
	}
}

func (t *chatTrace) events(evs []api.SessionEvent) {
	if t == nil {
		return
	}
	s := fmt.Sprintf("events %d %d", len(evs), evs[len(evs)-1].Seq)
	if slices.ContainsFunc(evs, func(ev api.SessionEvent) bool { return ev.Type == api.EventTurnEnd }) {
		s += " turn_end"
	}
	t.note(s)
}
