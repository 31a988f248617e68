package cli

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/hiloop/hiloop/internal/iostreams"
	"github.com/hiloop/hiloop/internal/styles"
	"github.com/hiloop/hiloop/pkg/api"
)

// Plain tables come out as text/tabwriter laid them out before colour: scripts read them.
func TestTableLayoutIsTabwriters(t *testing.T) {
	tables := map[string]*table{
		"list":        {header: []string{"NAME", "STATE", "AGE"}, rows: [][]string{{"web", "running", "3d"}, {"a-longer-name", "stopped", "12m"}}},
		"name: value": {rows: [][]string{{"name:", "web"}, {"state:", "running"}, {"workspace:", "10 GiB durable (growable)"}}},
		"ragged": {rows: [][]string{
			{"since 2026-11-29"}, {}, {"SANDBOX", "IN", "OUT"}, {"web", "12", "3400"}, {}, {"", "IN", "OUT"}, {"total", "1", "2"}, {"x", ""}, {"yy", "", "z"},
		}},
	}
	for name, tb := range tables {
		rows := tb.rows
		if tb.header != nil {
			rows = append([][]string{tb.header}, rows...)
		}
		var want bytes.Buffer
		tw := tabwriter.NewWriter(&want, 0, 4, 2, ' ', 0)
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		tw.Flush()
		if got := tb.render(styles.New(false)); got != want.String() {
			t.Errorf("%s: got\n%s\nwant (tabwriter)\n%s", name, got, want.String())
		}
	}
}

// Colour changes neither the text nor the alignment; it marks the header and the states.
func TestTableColour(t *testing.T) {
	tb := &table{header: []string{"NAME", "STATE", "AGE"}, rows: [][]string{{"web", "running", "3d"}, {"db", "failed", "1h"}}}
	st := styles.New(true)
	got := tb.render(st)
	if plain := tb.render(styles.New(false)); ansi.Strip(got) != plain {
		t.Errorf("coloured table reads\n%s\nplain it is\n%s", ansi.Strip(got), plain)
	}
	for _, want := range []string{st.TableHeader.Render("NAME"), st.Success.Render("running"), st.Error.Render("failed")} {
		if !strings.Contains(got, want) {
			t.Errorf("coloured table %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, st.Success.Render("web")) {
		t.Error("the NAME column is coloured as a state")
	}
}

// fakeSandboxes serves a sandbox list and a not-found error.
func fakeSandboxes(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/sandboxes":
			reply(w, http.StatusOK, api.SandboxList{Sandboxes: []api.Sandbox{
				{Name: "web", State: api.StateRunning, Image: "base", CreatedAt: time.Now()},
				{Name: "db", State: api.StateStopped, Image: "base", CreatedAt: time.Now()},
			}})
		case "/v1/sandboxes/web/start":
			reply(w, http.StatusOK, api.Sandbox{Name: "web", State: api.StateRunning})
		default:
			fail(w, api.CodeNotFound, "sandbox \"nope\" not found")
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// What is not a terminal, or asked for as data, gets no escape; a terminal gets colour unless
// --no-color says otherwise.
func TestColourOnlyOnTerminals(t *testing.T) {
	host := fakeSandboxes(t)
	tests := []struct {
		name       string
		args       []string
		tty        bool
		wantEscOut bool
		wantEscErr bool
	}{
		{name: "table to a pipe", args: []string{"sandbox", "list"}},
		{name: "table to a terminal", args: []string{"sandbox", "list"}, tty: true, wantEscOut: true},
		{name: "json to a terminal", args: []string{"sandbox", "list", "-o", "json"}, tty: true},
		{name: "yaml to a terminal", args: []string{"sandbox", "list", "-o", "yaml"}, tty: true},
		{name: "--no-color", args: []string{"--no-color", "sandbox", "list"}, tty: true},
		{name: "error to a pipe", args: []string{"sandbox", "get", "nope"}},
		{name: "error to a terminal", args: []string{"sandbox", "get", "nope"}, tty: true, wantEscErr: true},
		{name: "error with --no-color", args: []string{"sandbox", "get", "nope", "--no-color"}, tty: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, out, errOut := iostreams.Test()
			ios.SetStdoutTTY(tt.tty)
			ios.SetStderrTTY(tt.tty)
			Run(&Factory{IO: ios, Host: host}, tt.args)
			if !strings.Contains(out.String()+errOut.String(), "web") && !strings.Contains(errOut.String(), "hiloop:") {
				t.Fatalf("nothing printed: stdout %q, stderr %q", out, errOut)
			}
			if got := strings.Contains(out.String(), "\x1b"); got != tt.wantEscOut {
				t.Errorf("escapes on stdout: %v, want %v: %q", got, tt.wantEscOut, out)
			}
			if got := strings.Contains(errOut.String(), "\x1b"); got != tt.wantEscErr {
				t.Errorf("escapes on stderr: %v, want %v: %q", got, tt.wantEscErr, errOut)
			}
		})
	}
}

// A call that can take seconds shows a spinner on a terminal stderr, cleared before the answer;
// off a terminal stderr stays empty.
func TestProgressOnlyOnTerminals(t *testing.T) {
	host := fakeSandboxes(t)
	for _, tty := range []bool{false, true} {
		ios, _, out, errOut := iostreams.Test()
		ios.SetStderrTTY(tty)
		if code := Run(&Factory{IO: ios, Host: host}, []string{"sandbox", "start", "web"}); code != 0 || out.String() != "web running\n" {
			t.Fatalf("stderr a terminal %v: exit %d, stdout %q, stderr %q", tty, code, out, errOut)
		}
		switch {
		case !tty && errOut.Len() != 0:
			t.Errorf("stderr not a terminal: got %q, want nothing", errOut)
		case tty && (!strings.Contains(errOut.String(), "starting web") || !strings.HasSuffix(errOut.String(), "\r"+ansi.EraseLineRight)):
			t.Errorf("stderr a terminal: got %q, want a spinner line for starting web, cleared", errOut)
		}
	}
}
