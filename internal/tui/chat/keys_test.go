package chat

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/hiloop/hiloop/pkg/api"
)

func wantCalls(t *testing.T, b *recordingBackend, want ...call) {
	t.Helper()
	if got := b.seen(); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Errorf("backend calls = %+v, want %+v", got, want)
	}
}

func TestEnterSends(t *testing.T) {
	h := newHarness(t, 60, 20, false)
	h.typeText("hello there")
	h.press("enter")
	wantCalls(t, h.b, call{op: "prompt", arg: "hello there"})
	if v := h.m.input.Value(); v != "" {
		t.Errorf("input after sending = %q, want empty", v)
	}
	h.press("enter") // nothing to send
	wantCalls(t, h.b, call{op: "prompt", arg: "hello there"})
}

func TestNewlineKeys(t *testing.T) {
	for _, k := range []string{"alt+enter", "ctrl+j"} {
		h := newHarness(t, 60, 20, false)
		h.typeText("a")
		h.press(k)
		h.typeText("b")
		if v := h.m.input.Value(); v != "a\nb" {
			t.Errorf("%s: input = %q, want %q", k, v, "a\nb")
		}
		wantCalls(t, h.b)
		h.press("enter")
		wantCalls(t, h.b, call{op: "prompt", arg: "a\nb"})
	}
}

func TestPromptWhileRunningIsRefused(t *testing.T) {
	h := newHarness(t, 60, 20, false)
	h.events(prompt("first"), chunk("working"))
	h.typeText("second")
	h.press("enter")
	wantCalls(t, h.b)
	if v := h.m.input.Value(); v != "second" {
		t.Errorf("input = %q, want the refused prompt kept", v)
	}
	if !strings.Contains(h.screen(), "a turn is running") {
		t.Errorf("no note says why:\n%s", h.screen())
	}
	h.events(turnEnd(api.StopReasonEndTurn))
	h.press("enter")
	wantCalls(t, h.b, call{op: "prompt", arg: "second"})
}

func TestBackendErrorIsANote(t *testing.T) {
	h := newHarness(t, 60, 20, false)
	h.b.err = errors.New("sandbox web is stopped")
	h.typeText("hi")
	h.press("enter")
	if h.quit {
		t.Fatal("a backend error ended the program")
	}
	if s := h.screen(); !strings.Contains(s, "not sent: sandbox web is stopped") {
		t.Errorf("no note shows the error:\n%s", s)
	}
	if v := h.m.input.Value(); v != "hi" {
		t.Errorf("input = %q, want the prompt back", v)
	}
}

func TestHistory(t *testing.T) {
	h := newHarness(t, 60, 20, false)
	h.events(prompt("first"), turnEnd(api.StopReasonEndTurn), prompt("second\nline"), turnEnd(api.StopReasonEndTurn))
	h.typeText("draft")
	steps := []struct{ key, want string }{
		{"up", "second\nline"},
		{"up", "first"}, // the cursor is at the start after a step back: up goes on at once
		{"up", "first"}, // the oldest: nothing before it
		{"down", "second\nline"},
		{"down", "draft"},
		{"down", "draft"},
	}
	for i, s := range steps {
		h.press(s.key)
		if v := h.m.input.Value(); v != s.want {
			t.Fatalf("step %d (%s): input = %q, want %q", i, s.key, v, s.want)
		}
	}
}

func TestCtrlC(t *testing.T) {
	t.Run("running: once cancels, twice quits", func(t *testing.T) {
		h := newHarness(t, 60, 20, false)
		h.events(prompt("go"))
		h.press("ctrl+c")
		wantCalls(t, h.b, call{op: "cancel"})
		if h.quit {
			t.Fatal("the first ctrl+c quit")
		}
		if s := h.screen(); !strings.Contains(s, "cancelling…") {
			t.Errorf("the status does not say cancelling:\n%s", s)
		}
		h.clock = h.clock.Add(time.Second)
		h.press("ctrl+c")
		if !h.quit {
			t.Error("a second ctrl+c within 2 s did not quit")
		}
		wantCalls(t, h.b, call{op: "cancel"})
	})
	t.Run("running: a second ctrl+c after 2 s does not quit", func(t *testing.T) {
		h := newHarness(t, 60, 20, false)
		h.events(prompt("go"))
		h.press("ctrl+c")
		h.clock = h.clock.Add(3 * time.Second)
		h.press("ctrl+c")
		if h.quit {
			t.Error("ctrl+c 3 s after the first quit")
		}
		wantCalls(t, h.b, call{op: "cancel"}) // cancelling already: not asked twice
	})
	t.Run("idle with an empty input quits", func(t *testing.T) {
		h := newHarness(t, 60, 20, false)
		h.press("ctrl+c")
		if !h.quit {
			t.Error("ctrl+c while idle with an empty input did not quit")
		}
		wantCalls(t, h.b)
	})
	t.Run("idle with text clears it", func(t *testing.T) {
		h := newHarness(t, 60, 20, false)
		h.typeText("half a thought")
		h.press("ctrl+c")
		if h.quit || h.m.input.Value() != "" {
			t.Fatalf("quit=%v input=%q, want the input cleared and the chat open", h.quit, h.m.input.Value())
		}
		h.press("ctrl+c")
		if !h.quit {
			t.Error("a second ctrl+c did not quit")
		}
	})
	t.Run("ctrl+d quits", func(t *testing.T) {
		h := newHarness(t, 60, 20, false)
		h.events(prompt("go"))
		h.typeText("x")
		h.press("ctrl+d")
		if !h.quit {
			t.Error("ctrl+d did not quit")
		}
	})
}

func TestPermissionKeys(t *testing.T) {
	allowRejectOnce := []string{api.OptionAllowOnce, api.OptionRejectOnce}
	cases := []struct {
		name    string
		options []string
		keys    []string
		want    []call
	}{
		{"y allows once", allowRejectOnce, []string{"y"}, []call{{"answer", "t1", api.OptionAllowOnce}}},
		{"a allows once", allowRejectOnce, []string{"a"}, []call{{"answer", "t1", api.OptionAllowOnce}}},
		{"n rejects once", allowRejectOnce, []string{"n"}, []call{{"answer", "t1", api.OptionRejectOnce}}},
		{"A not offered", allowRejectOnce, []string{"A", "N"}, nil},
		{"A allows always", []string{api.OptionAllowOnce, api.OptionAllowAlways}, []string{"A"},
			[]call{{"answer", "t1", api.OptionAllowAlways}}},
		{"N rejects always", []string{api.OptionRejectAlways}, []string{"N"}, []call{{"answer", "t1", api.OptionRejectAlways}}},
		{"arrows and enter", allowRejectOnce, []string{"down", "down", "up", "down", "enter"},
			[]call{{"answer", "t1", api.OptionRejectOnce}}},
		{"answered once", allowRejectOnce, []string{"y", "y", "n"}, []call{{"answer", "t1", api.OptionAllowOnce}}},
		{"typing goes nowhere", allowRejectOnce, []string{"x", "?"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, 60, 20, false)
			h.events(prompt("go"), permissionAsk("t1", "rm -rf build", c.options...))
			h.press(c.keys...)
			wantCalls(t, h.b, c.want...)
			if v := h.m.input.Value(); v != "" {
				t.Errorf("keys reached the input: %q", v)
			}
		})
	}
}

func TestPermissionAnswerFailsThenRetries(t *testing.T) {
	h := newHarness(t, 60, 20, false)
	h.events(prompt("go"), permissionAsk("t1", "ls", api.OptionAllowOnce))
	h.b.err = errors.New("no such request")
	h.press("y")
	if s := h.screen(); !strings.Contains(s, "answer failed: no such request") || !strings.Contains(s, "Allow ls") {
		t.Errorf("want the error noted and the prompt still open:\n%s", s)
	}
	h.b.err = nil
	h.press("y")
	wantCalls(t, h.b, call{"answer", "t1", api.OptionAllowOnce}, call{"answer", "t1", api.OptionAllowOnce})
}

func TestPermissionsQueue(t *testing.T) {
	h := newHarness(t, 60, 20, false)
	h.events(prompt("go"), permissionAsk("t1", "first", api.OptionAllowOnce), permissionAsk("t2", "second", api.OptionRejectOnce))
	if s := h.screen(); !strings.Contains(s, "Allow first") {
		t.Fatalf("the oldest request is not the one asked:\n%s", s)
	}
	h.events(resolved("t1", api.OptionAllowOnce, ""))
	h.press("n")
	wantCalls(t, h.b, call{"answer", "t2", api.OptionRejectOnce})
}

func TestHelpToggle(t *testing.T) {
	h := newHarness(t, 60, 30, false)
	h.press("?")
	if s := h.screen(); !strings.Contains(s, "reject always") {
		t.Fatalf("? with an empty input shows no help:\n%s", s)
	}
	h.press("?")
	if s := h.screen(); strings.Contains(s, "reject always") {
		t.Fatalf("? again does not close the help:\n%s", s)
	}
	h.typeText("why?")
	if v := h.m.input.Value(); v != "why?" {
		t.Errorf("input = %q, want the ? typed", v)
	}
	if s := h.screen(); strings.Contains(s, "reject always") {
		t.Errorf("? after text opened the help:\n%s", s)
	}
}

func TestLargePaste(t *testing.T) {
	h := newHarness(t, 80, 24, false)
	var b strings.Builder
	for i := range 3000 {
		b.WriteString(strings.Repeat("x", i%90))
		b.WriteByte('\n')
	}
	text := strings.TrimSuffix(b.String(), "\n")
	h.send(tea.PasteMsg{Content: text})
	if v := h.m.input.Value(); v != text {
		t.Fatalf("pasted %d bytes, the input holds %d", len(text), len(v))
	}
	if got := strings.Count(h.screen(), "\n") + 1; got != 24 {
		t.Errorf("the screen has %d lines, want 24: the input must not push the transcript off", got)
	}
	h.press("enter")
	if calls := h.b.seen(); len(calls) != 1 || calls[0].arg != text {
		t.Errorf("the paste was not sent whole")
	}
}

// transcriptLines feeds n one-line turns.
func transcriptLines(h *harness, n int) {
	var evs []api.SessionEvent
	for i := range n {
		evs = append(evs, prompt("question "+strconv.Itoa(i)), chunk("answer "+strconv.Itoa(i)), turnEnd(api.StopReasonEndTurn))
	}
	h.events(evs...)
}

func TestScrolling(t *testing.T) {
	h := newHarness(t, 60, 12, false)
	transcriptLines(h, 30)
	if s := h.screen(); !strings.Contains(s, "answer 29") {
		t.Fatalf("the window does not follow the bottom:\n%s", s)
	}
	h.press("pgup")
	s := h.screen()
	if strings.Contains(s, "answer 29") || !strings.Contains(s, "answer 27") {
		t.Fatalf("pgup did not scroll a page up:\n%s", s)
	}
	h.events(prompt("late"), chunk("late answer"), turnEnd(api.StopReasonEndTurn))
	s = h.screen()
	if strings.Contains(s, "late answer") || !strings.Contains(s, "new output below") {
		t.Fatalf("scrolled up, new output must not move the window and must be hinted:\n%s", s)
	}
	h.send(tea.MouseWheelMsg{Button: tea.MouseWheelUp})
	h.press("ctrl+home")
	if s := h.screen(); !strings.Contains(s, "question 0") {
		t.Fatalf("ctrl+home did not go to the top:\n%s", s)
	}
	for range 40 {
		h.press("pgdown")
	}
	s = h.screen()
	if !strings.Contains(s, "late answer") || strings.Contains(s, "new output below") {
		t.Fatalf("paging down to the end must show the bottom and drop the hint:\n%s", s)
	}
	h.events(prompt("later"), chunk("later answer"))
	if s := h.screen(); !strings.Contains(s, "later answer") {
		t.Fatalf("back at the bottom, the window must follow again:\n%s", s)
	}
	h.send(tea.MouseWheelMsg{Button: tea.MouseWheelUp})
	h.press("ctrl+end")
	if !h.m.follow {
		t.Error("ctrl+end does not follow the bottom")
	}
}

func TestResizeReflows(t *testing.T) {
	h := newHarness(t, 100, 20, false)
	long := strings.Repeat("word ", 30)
	h.events(prompt("q"), chunk(long), turnEnd(api.StopReasonEndTurn))
	for _, w := range []int{40, 100, 25} {
		h.send(tea.WindowSizeMsg{Width: w, Height: 20})
		for i, l := range strings.Split(h.screen(), "\n") {
			if lw := len([]rune(l)); lw > w {
				t.Errorf("width %d: line %d is %d wide: %q", w, i, lw, l)
			}
		}
	}
}

func TestFrameRate(t *testing.T) {
	h := newHarness(t, 60, 20, false)
	var ticks int
	h.m.frame = time.Second / 60
	h.m.after = func(d time.Duration, f func(time.Time) tea.Msg) tea.Cmd {
		if _, ok := f(time.Time{}).(frameMsg); ok {
			ticks++
		}
		return nil // the test delivers the frame itself
	}
	h.events(prompt("go"), chunk("first"))
	_ = h.screen()
	h.events(chunk(" second"))
	h.events(chunk(" third"))
	if s := h.screen(); strings.Contains(s, "second") {
		t.Fatalf("events within a frame of the last draw were drawn at once:\n%s", s)
	}
	if ticks != 1 {
		t.Errorf("%d frame ticks asked, want 1", ticks)
	}
	h.send(frameMsg{})
	if s := h.screen(); !strings.Contains(s, "first second third") {
		t.Fatalf("the frame did not draw the events:\n%s", s)
	}
	h.events(chunk(" fourth"))
	h.typeText("x") // a key draws at once
	if s := h.screen(); !strings.Contains(s, "fourth") {
		t.Errorf("a key press did not draw:\n%s", s)
	}
}
