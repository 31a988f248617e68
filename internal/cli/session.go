package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/hiloop/hiloop/internal/iostreams"
	"github.com/hiloop/hiloop/internal/lockedwriter"
	"github.com/hiloop/hiloop/internal/sessionview"
	"github.com/hiloop/hiloop/internal/yamlout"
	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

func newCmdSession(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "session <verb>",
		Aliases: []string{"sessions"},
		Short:   "Run a coding agent in a sandbox: prompt it, watch it, answer its permission requests",
		Long: `A session is a coding-agent harness (claude-code, codex, opencode, fake) that runs in a
sandbox and takes prompts. The daemon keeps every session's events (prompts, the agent's
messages, tool calls, permission requests and their answers, turn ends, errors) in a durable,
numbered log that any number of watchers can follow, from any point, across daemon restarts.

A turn runs in the daemon whether or not anyone watches: ` + "`session prompt`" + ` starts one and follows it;
` + "`session events --follow`" + ` watches from elsewhere. A session's permission policy decides who
answers the harness's requests to run tools: auto-approve (the default) allows each one once;
ask waits for an operator's ` + "`session approve`" + ` or ` + "`session deny`" + `.`,
		Example: `  id=$(hiloop session new web)
  hiloop session prompt "$id" "run the tests and fix what fails"
  hiloop session events "$id" --follow`,
	}
	cmd.AddCommand(
		newCmdSessionNew(f, nil),
		newCmdSessionList(f, nil),
		newCmdSessionGet(f, nil),
		newCmdSessionPrompt(f, nil),
		newCmdSessionEvents(f, nil),
		newCmdSessionApprove(f, nil),
		newCmdSessionDeny(f, nil),
		newCmdSessionCancel(f, nil),
		newCmdSessionBudget(f, nil),
		newCmdSessionDelete(f, nil),
	)
	return cmd
}

// SessionNewOptions are the argument and flags of `hiloop session new`.
type SessionNewOptions struct {
	Post           api.SessionsPost
	IdempotencyKey string
	// Output is the -o format, or "" to print the new session's id alone.
	Output string
}

func newCmdSessionNew(f *Factory, runF func(*SessionNewOptions) error) *cobra.Command {
	opts := &SessionNewOptions{}
	cmd := &cobra.Command{
		Use:     "new SANDBOX [--harness NAME] [--policy auto-approve|ask] [--cwd DIR] [--budget-tokens N]",
		Aliases: []string{"create"},
		Short:   "Start a coding-agent session in a sandbox and print its id",
		Long: `Create a session of a coding-agent harness in the sandbox, working in DIR. The daemon
starts the harness (in ACP mode) for the session's first prompt, and keeps it running for the
next ones. It prints the new session's id (or the session with -o).

The harness is one of claude-code, codex, opencode and fake; an unknown name is
harness_not_found. The sandbox's image must carry it (` + "`hiloop image list`" + ` shows which harnesses
each image has; the agents image has claude-code, codex and opencode), else the command fails
with harness_not_in_image, naming the image to create the sandbox from. Without --harness the
session runs the first harness the image carries, else fake where sandboxd provides it; with
none at all it is harness_not_in_image too. Without --policy the session follows its sandbox's permission policy:
auto-approve allows every tool call once, ask waits for ` + "`hiloop session approve`" + ` or ` + "`deny`" + `.
With --budget-tokens, the model route refuses the session's requests once they have spent N
tokens (` + "`hiloop session budget`" + ` raises it). With --idempotency-key, repeating the command
returns the same session.`,
		Example: `  hiloop session new web
  hiloop sandbox create agent --image agents && hiloop session new agent --harness codex
  hiloop session new web --harness opencode --policy ask --cwd /workspace/api
  hiloop session new agent --harness claude-code --budget-tokens 500000
  id=$(hiloop session new web --idempotency-key ci-run-42)`,
		Args: exactArgs(1, "one SANDBOX name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Post.Sandbox = args[0]
			if err := api.ValidatePolicy("--policy", opts.Post.PermissionPolicy); err != nil {
				return &usageError{err}
			}
			if opts.Post.Cwd != "" && !strings.HasPrefix(opts.Post.Cwd, "/") {
				return &usageError{fmt.Errorf("invalid --cwd %q: use an absolute path in the sandbox, e.g. %s", opts.Post.Cwd, api.DefaultSessionCwd)}
			}
			if err := api.ValidateBudget("--budget-tokens", opts.Post.BudgetTokens); err != nil {
				return &usageError{err}
			}
			if err := summaryUnlessOutput(cmd, &opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, sessionNewRun)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Post.Harness, "harness", "", "the harness to run: claude-code, codex, opencode or fake (default: the first the sandbox's image carries)")
	fl.StringVar((*string)(&opts.Post.PermissionPolicy), "policy", "", "who answers permission requests: auto-approve or ask (default: the sandbox's policy)")
	fl.StringVar(&opts.Post.Cwd, "cwd", "", "the harness's working directory in the sandbox (default "+api.DefaultSessionCwd+")")
	fl.Int64Var(&opts.Post.BudgetTokens, "budget-tokens", 0, "the model tokens the session may spend (default: no budget of its own)")
	fl.StringVar(&opts.IdempotencyKey, "idempotency-key", "", "make the request safe to repeat: the same key returns the same session")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func sessionNewRun(ctx context.Context, f *Factory, opts *SessionNewOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	s, err := c.CreateSession(ctx, opts.Post, idempotencyKey(opts.IdempotencyKey)...)
	if err != nil {
		return err
	}
	if opts.Output != "" {
		return printSession(f, opts.Output, s)
	}
	fmt.Fprintln(f.IO.Out, s.ID)
	return nil
}

// SessionListOptions are the argument and flags of `hiloop session list`.
type SessionListOptions struct {
	Sandbox  string // "" for the sessions of every sandbox
	AllUsers bool
	Output   string
}

func newCmdSessionList(f *Factory, runF func(*SessionListOptions) error) *cobra.Command {
	opts := &SessionListOptions{}
	cmd := &cobra.Command{
		Use:     "list [SANDBOX]",
		Aliases: []string{"ls"},
		Short:   "List sessions, all or those in one sandbox",
		Example: "  hiloop session list\n  hiloop session list web -o json",
		Args:    maxArgs(1, "one SANDBOX name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Sandbox = args[0]
			}
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, sessionListRun)
		},
	}
	addAllUsersFlag(cmd, &opts.AllUsers)
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func sessionListRun(ctx context.Context, f *Factory, opts *SessionListOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	list, err := c.ListSessions(ctx, opts.Sandbox, listOptions(opts.AllUsers)...)
	if err != nil {
		return err
	}
	return printOutput(f.IO, opts.Output, api.SessionList{Sessions: list}, func(t *table) {
		t.head(withUser(opts.AllUsers, "USER", "ID", "SANDBOX", "HARNESS", "POLICY", "STATE", "EVENTS", "AGE")...)
		for _, s := range list {
			t.row(withUser(opts.AllUsers, s.Owner, s.ID, s.Sandbox, s.Harness, string(s.PermissionPolicy), string(s.State),
				strconv.FormatUint(s.LastSeq, 10), age(s.CreatedAt))...)
		}
	})
}

// SessionGetOptions are the argument and flags of `hiloop session get`.
type SessionGetOptions struct {
	Session string
	Output  string
}

func newCmdSessionGet(f *Factory, runF func(*SessionGetOptions) error) *cobra.Command {
	opts := &SessionGetOptions{}
	cmd := &cobra.Command{
		Use:     "get SESSION",
		Short:   "Show one session, with the model tokens it spent and its budget",
		Example: "  hiloop session get k3x9q2m7v4b8 -o json",
		Args:    exactArgs(1, "one SESSION id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := api.ValidateSessionID(args[0]); err != nil {
				return err
			}
			opts.Session = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, sessionGetRun)
		},
	}
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func sessionGetRun(ctx context.Context, f *Factory, opts *SessionGetOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	s, err := c.GetSession(ctx, opts.Session)
	if err != nil {
		return err
	}
	return printSession(f, opts.Output, s)
}

func printSession(f *Factory, output string, s api.Session) error {
	return printOutput(f.IO, output, s, func(t *table) {
		t.row("id:", s.ID)
		t.row("sandbox:", s.Sandbox)
		t.row("harness:", s.Harness)
		t.row("cwd:", s.Cwd)
		t.row("policy:", string(s.PermissionPolicy))
		t.row("state:", string(s.State))
		t.row("events:", strconv.FormatUint(s.LastSeq, 10))
		if s.ACPSessionID != "" {
			t.row("acp session:", s.ACPSessionID)
		}
		modelUsageRows(t, s.ModelUsage)
		t.row("created:", s.CreatedAt.Local().Format(time.RFC3339))
	})
}

// SessionPromptOptions are the flags and arguments of `hiloop session prompt`.
type SessionPromptOptions struct {
	Session        string
	Text           string
	Thoughts       bool
	Output         string
	IdempotencyKey string

	// interrupts delivers Ctrl-C; nil for the process's own SIGINT.
	interrupts <-chan os.Signal
}

func newCmdSessionPrompt(f *Factory, runF func(*SessionPromptOptions) error) *cobra.Command {
	opts := &SessionPromptOptions{}
	cmd := &cobra.Command{
		Use:   "prompt SESSION (TEXT... | -)",
		Short: "Send the agent a prompt and follow its turn to the end",
		Long: `Send the agent a prompt and follow the turn it starts until it ends. TEXT is the words
after SESSION joined by spaces (put -- before TEXT that starts with a dash); "-" reads the
prompt from stdin.

The agent's reply streams to stdout as it is written. Tool calls, plans, permission requests
(with the commands that answer them), notices and errors go to stderr; so do the agent's
thoughts with --thoughts. With -o json, stdout gets every event of the turn, the prompt's own
first, one JSON object (api.SessionEvent) per line.

The first Ctrl-C cancels the turn and waits for it to end; a second one quits at once (exit 130)
and leaves the turn to the daemon. A dropped connection to the daemon is picked up where it
left off. hiloop exits 0 when the turn ends normally (the stop reason goes to stderr unless it
is end_turn), 1 when it fails or is cancelled, and 5 when the session is busy with another turn.
With --idempotency-key, repeating the command sends the prompt once and follows that turn again.`,
		Example: `  hiloop session prompt k3x9q2m7v4b8 "add a --verbose flag to the CLI"
  git diff | hiloop session prompt k3x9q2m7v4b8 -
  hiloop session prompt k3x9q2m7v4b8 -o json "run the tests" | jq -c 'select(.type=="turn_end")'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return &usageError{fmt.Errorf("prompt takes a SESSION id and the prompt's TEXT (or - to read it from stdin)")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := api.ValidateSessionID(args[0]); err != nil {
				return err
			}
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			opts.Session = args[0]
			opts.Text = strings.Join(args[1:], " ")
			if len(args) == 2 && args[1] == "-" {
				b, err := io.ReadAll(io.LimitReader(f.IO.In, api.MaxPromptBytes+1))
				if err != nil {
					return fmt.Errorf("read the prompt from stdin: %w", err)
				}
				opts.Text = string(b)
			}
			if len(opts.Text) > api.MaxPromptBytes {
				return &usageError{fmt.Errorf("the prompt is longer than %d KiB", api.MaxPromptBytes>>10)}
			}
			if strings.TrimSpace(opts.Text) == "" {
				return &usageError{fmt.Errorf("the prompt is empty")}
			}
			return runCommand(cmd, f, opts, runF, sessionPromptRun)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&opts.Thoughts, "thoughts", false, "also show the agent's thoughts (on stderr)")
	fl.StringVar(&opts.IdempotencyKey, "idempotency-key", "", "make the request safe to repeat: the same key sends the prompt once")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

// promptRideOut is how long `session prompt` keeps sending its prompt to a daemon that went
// away while it was sent (a restart), before it gives up.
const promptRideOut = 60 * time.Second

// promptRidingRestarts sends the prompt, and once a daemon that was reached stops answering
// (it stopped mid-request), sends it again with the same idempotency key until it answers, for
// up to promptRideOut: the daemon stores a prompt once per key, so a prompt it stored before
// it stopped is not sent twice. A daemon not reached at all is an error at once.
func promptRidingRestarts(ctx context.Context, c *client.Client, opts *SessionPromptOptions, errOut io.Writer) (api.PromptAccepted, error) {
	key := opts.IdempotencyKey
	if key == "" {
		key = client.NewIdempotencyKey()
	}
	deadline := time.Now().Add(promptRideOut)
	told := false
	for {
		accepted, err := c.Prompt(ctx, opts.Session, api.PromptPost{Text: opts.Text}, client.WithIdempotencyKey(key))
		var apiErr *api.Error
		var unreachable *client.UnreachableError
		switch {
		case err == nil, errors.As(err, &apiErr) && apiErr.Code != api.CodeUnavailable, ctx.Err() != nil, time.Now().After(deadline):
			return accepted, err
		case !told && errors.As(err, &unreachable):
			return accepted, err // never reached
		}
		if !told {
			fmt.Fprintf(errOut, "hiloop: %s; sending the prompt again once sandboxd answers\n", err)
			told = true
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return api.PromptAccepted{}, ctx.Err()
		}
	}
}

func sessionPromptRun(ctx context.Context, f *Factory, opts *SessionPromptOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	accepted, err := promptRidingRestarts(ctx, c, opts, f.IO.ErrOut)
	if err != nil {
		return busyHint(err, opts.Session)
	}

	interrupts := opts.interrupts
	if interrupts == nil {
		sig := make(chan os.Signal, 2)
		signal.Notify(sig, os.Interrupt)
		defer signal.Stop(sig)
		interrupts = sig
	}
	// The stream and the Ctrl-C handler both write to stderr.
	errOut := lockedwriter.New(f.IO.ErrOut)
	tp := newTurnPrinter(f.IO, errOut, opts)
	after := accepted.Seq
	if tp.format != "table" {
		after-- // the prompt's own event too
	}

	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	var quit atomic.Bool
	var cancels sync.WaitGroup
	go func() {
		select {
		case <-interrupts:
		case <-streamCtx.Done():
			return
		}
		fmt.Fprintln(errOut, "hiloop: cancelling the turn; Ctrl-C again quits without waiting")
		cancels.Go(func() {
			cctx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer done()
			if _, err := c.CancelSession(cctx, opts.Session); err != nil {
				fmt.Fprintf(errOut, "hiloop: cancel the turn: %s\n", err)
			}
		})
		select {
		case <-interrupts:
			quit.Store(true)
			stopStream()
		case <-streamCtx.Done():
		}
	}()

	err = c.Stream(streamCtx, opts.Session, after, tp.event, client.OnStreamLost(func(err error) {
		fmt.Fprintf(errOut, "hiloop: %s; reconnecting\n", err)
	}))
	if quit.Load() {
		return &exitError{code: ExitInterrupted}
	}
	stopStream()
	cancels.Wait()
	if err != nil {
		return err
	}
	return tp.finish()
}

// busyHint says what to do about a session whose turn still runs.
func busyHint(err error, session string) error {
	var apiErr *api.Error
	if errors.As(err, &apiErr) && apiErr.Code == api.CodeTurnInProgress {
		return &api.Error{Code: apiErr.Code, Message: fmt.Sprintf(
			"session %s is busy with a turn: follow it with `hiloop session events %s --follow`, or end it with `hiloop session cancel %s`",
			session, session, session)}
	}
	return err
}

// turnPrinter follows one turn: it shows its events (for people through sessionview, else as
// -o prints them) and keeps how the turn ended, for the exit code.
type turnPrinter struct {
	out, errOut io.Writer
	session     string
	format      string               // table (for people), json or yaml
	view        *sessionview.Printer // for table

	ended      bool
	stopReason api.StopReason
	lastError  *api.ErrorData
}

func newTurnPrinter(ios *iostreams.IOStreams, errOut io.Writer, opts *SessionPromptOptions) *turnPrinter {
	format := opts.Output
	if format == "" {
		format = "table"
	}
	return &turnPrinter{
		out: ios.Out, errOut: errOut, session: opts.Session, format: format,
		view: sessionview.NewPrinter(sessionview.PrinterOptions{
			Out: ios.Out, ErrOut: errOut, Session: opts.Session, Thoughts: opts.Thoughts,
			Shared: ios.IsStdoutTTY() && ios.IsStderrTTY(), Dim: ios.StylesStderr().Dim,
		}),
	}
}

// event shows one event; it stops the stream at the turn's end.
func (p *turnPrinter) event(ev api.SessionEvent) error {
	if p.format != "table" {
		if err := writeEvent(p.out, p.format, ev); err != nil {
			return err
		}
	} else {
		p.view.Show(ev)
	}
	switch ev.Type {
	case api.EventError:
		var d api.ErrorData
		if json.Unmarshal(ev.Data, &d) == nil {
			p.lastError = &d
		}
	case api.EventTurnEnd:
		var d api.TurnEndData
		_ = json.Unmarshal(ev.Data, &d)
		p.ended, p.stopReason = true, d.StopReason
		return client.ErrStopStream
	}
	return nil
}

// finish ends the output and turns the turn's stop reason into an exit code.
func (p *turnPrinter) finish() error {
	if p.view != nil {
		p.view.Finish()
	}
	if !p.ended {
		return fmt.Errorf("the event stream of session %s ended before the turn did", p.session)
	}
	switch p.stopReason {
	case api.StopReasonEndTurn:
		return nil
	case api.StopReasonCancelled:
		return &exitMessage{code: ExitError, msg: "turn cancelled"}
	case api.StopReasonError:
		switch {
		case p.lastError == nil:
			return &exitMessage{code: ExitError, msg: "the turn failed; see `hiloop session events " + p.session + "`"}
		case p.format == "table":
			return &exitError{code: ExitError} // shown as it came
		}
		return &exitMessage{code: ExitError, msg: sessionview.ErrorText(*p.lastError)}
	}
	fmt.Fprintf(p.errOut, "hiloop: the turn stopped: %s\n", p.stopReason)
	return nil
}

// SessionEventsOptions are the flags and arguments of `hiloop session events`.
type SessionEventsOptions struct {
	Session string
	After   uint64
	Follow  bool
	Output  string
}

func newCmdSessionEvents(f *Factory, runF func(*SessionEventsOptions) error) *cobra.Command {
	opts := &SessionEventsOptions{}
	cmd := &cobra.Command{
		Use:   "events SESSION [--after N] [--follow]",
		Short: "Show a session's events, and with --follow keep watching for new ones",
		Long: `Show a session's stored events with seq greater than N, one per line: the seq, the type and
a short summary (the prompt, the update's kind and text, the tool and options of a permission
request, the stop reason of a turn end, the message of an error). With -o json, each line is
one api.SessionEvent as the daemon sent it.

With --follow, keep watching for new events until Ctrl-C (exit 0); a dropped connection to the
daemon is picked up where it left off, so no event is shown twice or missed.`,
		Example: `  hiloop session events k3x9q2m7v4b8
  hiloop session events k3x9q2m7v4b8 --after 120 --follow
  hiloop session events k3x9q2m7v4b8 -o json | jq -r 'select(.type=="prompt") | .data.text'`,
		Args: exactArgs(1, "one SESSION id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := api.ValidateSessionID(args[0]); err != nil {
				return err
			}
			opts.Session = args[0]
			if err := checkOutput(opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, sessionEventsRun)
		},
	}
	fl := cmd.Flags()
	fl.Uint64Var(&opts.After, "after", 0, "show only events with seq greater than N")
	fl.BoolVarP(&opts.Follow, "follow", "f", false, "keep watching for new events until Ctrl-C")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

// sessionEventsRun prints a session's events; with opts.Follow it runs until ctx ends, and that
// is success.
func sessionEventsRun(ctx context.Context, f *Factory, opts *SessionEventsOptions) error {
	ctx, stop := followContext(ctx, opts.Follow)
	defer stop()
	c, err := f.Client()
	if err != nil {
		return err
	}
	show := func(ev api.SessionEvent) error {
		if opts.Output != "table" {
			return writeEvent(f.IO.Out, opts.Output, ev)
		}
		_, err := fmt.Fprintf(f.IO.Out, "%-6d %-19s %s\n", ev.Seq, ev.Type, sessionview.Summary(ev))
		return err
	}
	if !opts.Follow {
		for ev, err := range c.AllEvents(ctx, opts.Session, opts.After) {
			if err != nil {
				return err
			}
			if err := show(ev); err != nil {
				return err
			}
		}
		return nil
	}
	err = c.Stream(ctx, opts.Session, opts.After, show, client.OnStreamLost(func(err error) {
		fmt.Fprintf(f.IO.ErrOut, "hiloop: %s; reconnecting\n", err)
	}))
	if ctx.Err() != nil {
		return nil // Ctrl-C ends a follow
	}
	return err
}

// writeEvent prints one event as a JSON line or a YAML document.
func writeEvent(w io.Writer, format string, ev api.SessionEvent) error {
	if format == "yaml" {
		b, err := yamlout.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "---\n%s", b)
		return err
	}
	if b, ok := appendEventJSON(nil, ev); ok {
		_, err := w.Write(b)
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // keep the data as the daemon sent it
	return enc.Encode(ev)
}

// appendEventJSON appends ev as the JSON line writeEvent's encoder would write, without the
// encoder's reflection and its re-validation of the data, which cost a chatty turn's `-o json`
// as much as everything else the CLI does with an event. ok is false for an event it cannot
// write so (its data is not on one line, its type needs escaping): the encoder writes those.
// The data goes out as it came: for the compact JSON the daemon sends, the line is the
// encoder's byte for byte (TestAppendEventJSON).
func appendEventJSON(b []byte, ev api.SessionEvent) (_ []byte, ok bool) {
	for _, c := range []byte(ev.Type) {
		if c < ' ' || c > '~' || c == '"' || c == '\\' {
			return b, false
		}
	}
	if bytes.ContainsAny(ev.Data, "\r\n") {
		return b, false
	}
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, ev.Seq, 10)
	b = append(b, `,"type":"`...)
	b = append(b, ev.Type...)
	b = append(b, `","time":`...)
	t, err := ev.Time.MarshalJSON()
	if err != nil {
		return b, false
	}
	b = append(b, t...)
	if len(ev.Data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, ev.Data...)
	}
	return append(b, "}\n"...), true
}

// SessionAnswerOptions are the arguments and flags of `hiloop session approve` and `deny`.
type SessionAnswerOptions struct {
	Session string
	Request string // the tool call id
	Kind    string // the option kind to select, e.g. allow_once
	// Operator says who answers (--operator), by default user@hostname.
	Operator string
	// Output is the -o format, or "" for the one-line answer.
	Output string
}

func newCmdSessionApprove(f *Factory, runF func(*SessionAnswerOptions) error) *cobra.Command {
	return newCmdSessionAnswer(f, runF, "approve", "Allow a tool call the agent asked permission for",
		api.OptionAllowOnce, api.OptionAllowAlways)
}

func newCmdSessionDeny(f *Factory, runF func(*SessionAnswerOptions) error) *cobra.Command {
	return newCmdSessionAnswer(f, runF, "deny", "Refuse a tool call the agent asked permission for",
		api.OptionRejectOnce, api.OptionRejectAlways)
}

func newCmdSessionAnswer(f *Factory, runF func(*SessionAnswerOptions) error, verb, short, defaultKind, otherKind string) *cobra.Command {
	opts := &SessionAnswerOptions{}
	cmd := &cobra.Command{
		Use:   verb + " SESSION REQUEST [--option " + defaultKind + "|" + otherKind + "]",
		Short: short,
		Long: short + `, in a session under the ask policy.

REQUEST is the tool call id that ` + "`session prompt`" + ` and ` + "`session events`" + ` show with the
request. --option picks the answer by kind: ` + defaultKind + ` for this call only, ` + otherKind + ` for the
rest of the session (if the harness offers it). --operator names who answers (default user@host):
every watcher sees it with the decision. Answering again the same way prints the first
decision; answering differently is permission_decided (exit 5).`,
		Example: fmt.Sprintf("  hiloop session %s k3x9q2m7v4b8 toolu_01ABCD\n  hiloop session %s k3x9q2m7v4b8 toolu_01ABCD --option %s", verb, verb, otherKind),
		Args:    exactArgs(2, "a SESSION id and a REQUEST (tool call) id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := api.ValidateSessionID(args[0]); err != nil {
				return err
			}
			opts.Session, opts.Request = args[0], args[1]
			if opts.Kind != defaultKind && opts.Kind != otherKind {
				return &usageError{fmt.Errorf("invalid --option %q: %s takes %s or %s", opts.Kind, verb, defaultKind, otherKind)}
			}
			if !cmd.Flags().Changed("operator") {
				opts.Operator = defaultOperator() // here, not as the flag's default: every command would pay for it
			}
			if err := (api.PermissionAnswer{Operator: opts.Operator}).Validate(); err != nil {
				return &usageError{fmt.Errorf("invalid --operator: %w", err)}
			}
			if err := summaryUnlessOutput(cmd, &opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, sessionAnswerRun)
		},
	}
	cmd.Flags().StringVar(&opts.Kind, "option", defaultKind, "the kind of answer: "+defaultKind+" or "+otherKind)
	cmd.Flags().StringVar(&opts.Operator, "operator", "", "who answers, shown to everyone watching the session (default: you, as user@host)")
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func sessionAnswerRun(ctx context.Context, f *Factory, opts *SessionAnswerOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	d, err := c.AnswerPermission(ctx, opts.Session, opts.Request, api.PermissionAnswer{Kind: opts.Kind, Operator: opts.Operator})
	if err != nil {
		return err
	}
	if opts.Output != "" {
		return printOutput(f.IO, opts.Output, d, func(t *table) {
			t.row("request:", d.ToolCallID)
			t.row("outcome:", string(d.Outcome))
			t.row("kind:", d.Kind)
			t.row("by:", string(d.By))
			if d.Operator != "" {
				t.row("operator:", d.Operator)
			}
		})
	}
	fmt.Fprintln(f.IO.Out, sessionview.ResolvedLine(d, ""))
	return nil
}

// SessionCancelOptions are the argument and flags of `hiloop session cancel`.
type SessionCancelOptions struct {
	Session string
	// Output is the -o format, or "" for the one-line answer "ID STATE".
	Output string
}

func newCmdSessionCancel(f *Factory, runF func(*SessionCancelOptions) error) *cobra.Command {
	opts := &SessionCancelOptions{}
	cmd := &cobra.Command{
		Use:   "cancel SESSION",
		Short: "Cancel a session's running turn (a no-op on an idle session)",
		Long: `Ask the harness to end the running turn; a permission request still waiting is cancelled.
The turn ends with stop reason "cancelled" once the harness has stopped. Prints the session's
id and state.`,
		Example: "  hiloop session cancel k3x9q2m7v4b8",
		Args:    exactArgs(1, "one SESSION id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := api.ValidateSessionID(args[0]); err != nil {
				return err
			}
			opts.Session = args[0]
			if err := summaryUnlessOutput(cmd, &opts.Output); err != nil {
				return err
			}
			return runCommand(cmd, f, opts, runF, sessionCancelRun)
		},
	}
	addOutputFlag(cmd, &opts.Output)
	return cmd
}

func sessionCancelRun(ctx context.Context, f *Factory, opts *SessionCancelOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	s, err := c.CancelSession(ctx, opts.Session)
	if err != nil {
		return err
	}
	if opts.Output != "" {
		return printSession(f, opts.Output, s)
	}
	fmt.Fprintf(f.IO.Out, "%s %s\n", s.ID, s.State)
	return nil
}

// SessionDeleteOptions are the argument of `hiloop session delete`.
type SessionDeleteOptions struct {
	Session string
}

func newCmdSessionDelete(f *Factory, runF func(*SessionDeleteOptions) error) *cobra.Command {
	opts := &SessionDeleteOptions{}
	return &cobra.Command{
		Use:     "delete SESSION",
		Aliases: []string{"rm"},
		Short:   "Delete a session with its events",
		Long: `Delete a session with its event log; the sandbox's harness, which serves its other
sessions too, keeps running. A session whose turn is running cannot be deleted
(turn_in_progress, exit 5): cancel the turn first.`,
		Example: "  hiloop session cancel k3x9q2m7v4b8 && hiloop session delete k3x9q2m7v4b8",
		Args:    exactArgs(1, "one SESSION id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := api.ValidateSessionID(args[0]); err != nil {
				return err
			}
			opts.Session = args[0]
			return runCommand(cmd, f, opts, runF, sessionDeleteRun)
		},
	}
}

func sessionDeleteRun(ctx context.Context, f *Factory, opts *SessionDeleteOptions) error {
	c, err := f.Client()
	if err != nil {
		return err
	}
	if err := c.DeleteSession(ctx, opts.Session); err != nil {
		return busyHint(err, opts.Session)
	}
	fmt.Fprintf(f.IO.Out, "%s deleted\n", opts.Session)
	return nil
}
