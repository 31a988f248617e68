package chat

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/hiloop/hiloop/pkg/api"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden from the screens the tests see")

// call is one Backend call a recordingBackend saw.
type call struct{ op, arg, kind string }

// recordingBackend records the calls the model makes and answers with err.
type recordingBackend struct {
	mu    sync.Mutex
	calls []call
	err   error
}

func (b *recordingBackend) record(c call) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, c)
	return b.err
}

func (b *recordingBackend) Prompt(_ context.Context, text string) error {
	return b.record(call{op: "prompt", arg: text})
}

func (b *recordingBackend) Cancel(context.Context) error { return b.record(call{op: "cancel"}) }

func (b *recordingBackend) Answer(_ context.Context, id, kind string) error {
	return b.record(call{op: "answer", arg: id, kind: kind})
}

func (b *recordingBackend) seen() []call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]call(nil), b.calls...)
}

// harness drives a Model as a tea.Program would, with its clock stopped: commands run at once,
// except ticks, which never fire.
type harness struct {
	t      *testing.T
	m      *Model
	b      *recordingBackend
	clock  time.Time
	quit   bool
	nextSq uint64
}

func newHarness(t *testing.T, w, h int, colour bool) *harness {
	t.Helper()
	b := &recordingBackend{}
	m := New(Options{
		Sandbox:      "web",
		SandboxState: "running",
		Session: api.Session{
			ID: "k3x9q2m7v4b8", Sandbox: "web", Harness: "fake", State: api.SessionIdle,
			PermissionPolicy: api.PolicyAsk,
		},
		Backend: b,
		Colour:  colour,
	})
	hs := &harness{t: t, m: m, b: b, clock: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	m.now = func() time.Time { return hs.clock }
	m.frame = 0 // every View draws; TestFrameRate covers the throttle
	m.after = func(time.Duration, func(time.Time) tea.Msg) tea.Cmd { return nil }
	hs.send(tea.WindowSizeMsg{Width: w, Height: h})
	hs.send(ConnMsg{State: ConnLive})
	return hs
}

// send delivers msg and runs the commands it returns, delivering their messages in turn.
func (h *harness) send(msg tea.Msg) {
	h.t.Helper()
	queue := []tea.Msg{msg}
	for len(queue) > 0 {
		msg, queue = queue[0], queue[1:]
		_, cmd := h.m.Update(msg)
		queue = append(queue, h.run(cmd)...)
	}
}

func (h *harness) run(cmd tea.Cmd) []tea.Msg {
	if cmd == nil {
		return nil
	}
	switch msg := cmd().(type) {
	case nil:
		return nil
	case tea.QuitMsg:
		h.quit = true
		return nil
	case tea.BatchMsg:
		var out []tea.Msg
		for _, c := range msg {
			out = append(out, h.run(c)...)
		}
		return out
	default:
		return []tea.Msg{msg}
	}
}

// press sends key presses named as tea prints them: "enter", "ctrl+c", "alt+enter", "y", "A".
func (h *harness) press(keys ...string) {
	h.t.Helper()
	for _, k := range keys {
		h.send(keyMsg(k))
	}
}

func keyMsg(k string) tea.KeyPressMsg {
	var mod tea.KeyMod
	for {
		switch {
		case strings.HasPrefix(k, "ctrl+"):
			mod |= tea.ModCtrl
			k = k[5:]
			continue
		case strings.HasPrefix(k, "alt+"):
			mod |= tea.ModAlt
			k = k[4:]
			continue
		}
		break
	}
	named := map[string]rune{
		"enter": tea.KeyEnter, "up": tea.KeyUp, "down": tea.KeyDown, "esc": tea.KeyEscape,
		"pgup": tea.KeyPgUp, "pgdown": tea.KeyPgDown, "home": tea.KeyHome, "end": tea.KeyEnd,
		"backspace": tea.KeyBackspace, "tab": tea.KeyTab,
	}
	if code, ok := named[k]; ok {
		return tea.KeyPressMsg{Code: code, Mod: mod}
	}
	r := []rune(k)[0]
	if mod != 0 {
		return tea.KeyPressMsg{Code: r, Mod: mod}
	}
	code := r
	if r >= 'A' && r <= 'Z' {
		code = r + ('a' - 'A')
		return tea.KeyPressMsg{Code: code, ShiftedCode: r, Text: k, Mod: tea.ModShift}
	}
	return tea.KeyPressMsg{Code: code, Text: k}
}

// typeText types s one key at a time.
func (h *harness) typeText(s string) {
	h.t.Helper()
	for _, r := range s {
		h.send(keyMsg(string(r)))
	}
}

// events sends evs numbered from the next seq on.
func (h *harness) events(evs ...api.SessionEvent) {
	h.t.Helper()
	for i := range evs {
		h.nextSq++
		evs[i].Seq = h.nextSq
	}
	h.send(EventsMsg(evs))
}

func (h *harness) screen() string {
	h.t.Helper()
	return h.m.View().Content
}

func ev(typ api.EventType, data any) api.SessionEvent {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	return api.SessionEvent{Type: typ, Data: b}
}

func prompt(text string) api.SessionEvent { return ev(api.EventPrompt, api.PromptPost{Text: text}) }

func update(kind string, fields map[string]any) api.SessionEvent {
	d := map[string]any{"sessionUpdate": kind}
	for k, v := range fields {
		d[k] = v
	}
	return ev(api.EventUpdate, d)
}

func chunk(text string) api.SessionEvent {
	return update("agent_message_chunk", map[string]any{"content": map[string]any{"type": "text", "text": text}})
}

func thought(text string) api.SessionEvent {
	return update("agent_thought_chunk", map[string]any{"content": map[string]any{"type": "text", "text": text}})
}

func turnEnd(r api.StopReason) api.SessionEvent {
	return ev(api.EventTurnEnd, api.TurnEndData{StopReason: r})
}

// golden compares got with testdata/NAME.golden, or rewrites it under -update. A screen with
// colour off must not hold a single escape sequence.
func golden(t *testing.T, name, got string) {
	t.Helper()
	if strings.Contains(got, "\x1b") {
		t.Errorf("%s: the screen holds an escape sequence with colour off:\n%q", name, got)
	}
	path := filepath.Join("testdata", name+".golden")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s: screen differs from %s (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}
