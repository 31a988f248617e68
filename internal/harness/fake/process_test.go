package fake

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"
)

// TestProcessRestartLoadsSessions runs the built binary twice over one state directory: the
// second process serves the first one's session after session/load, as after a daemon restart.
func TestProcessRestartLoadsSessions(t *testing.T) {
	state, cwd := t.TempDir(), t.TempDir()
	first := startProcess(t, state, &testClient{})
	first.initialize(t)
	id := first.newSession(t, cwd)
	if reason, err := first.prompt(t, id, "hello"); err != nil || reason != acp.StopReasonEndTurn {
		t.Fatalf("prompt: %q, %v; stderr:\n%s", reason, err, first.stderr.String())
	}
	if got := first.client.seen(); !slices.Equal(got, []string{"message:echo: hello"}) {
		t.Errorf("updates %q", got)
	}
	first.stop(t)

	c := &testClient{}
	second := startProcess(t, state, c)
	second.initialize(t)
	if _, err := second.conn.LoadSession(testContext(t), acp.LoadSessionRequest{SessionId: id, Cwd: cwd, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("session/load: %v", err)
	}
	if got, want := c.seen(), []string{"user:hello", "message:echo: hello"}; !slices.Equal(got, want) {
		t.Errorf("replay %q, want %q", got, want)
	}
	second.stop(t)
}

func TestProcessCrashExitsWithTheCode(t *testing.T) {
	said := make(chan string, 10)
	p := startProcess(t, t.TempDir(), &testClient{onUpdate: func(n acp.SessionNotification) { said <- describe(n.Update) }})
	p.initialize(t)
	id := p.newSession(t, t.TempDir())
	_, err := p.prompt(t, id, "run "+mustAbs(t, "testdata/crash.fake"))
	if err == nil {
		t.Error("a prompt whose agent crashed returned no error")
	}
	var exit *exec.ExitError
	if werr := p.wait(t); !errors.As(werr, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("process ended with %v, want exit code 3", werr)
	}
	// The SDK fails the prompt as soon as stdout closes and may still be handing the client the
	// updates read before that.
	select {
	case got := <-said:
		if got != "message:about to crash" {
			t.Errorf("first update %q, want the script's message", got)
		}
	case <-time.After(10 * time.Second):
		t.Error("the update written before the crash never arrived")
	}
	if !strings.Contains(p.stderr.String(), "fake agent: crashing on purpose\n") {
		t.Errorf("stderr:\n%s", p.stderr.String())
	}
}
