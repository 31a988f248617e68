//go:build linux

package runtime

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/hiloop/hiloop/internal/testenv"
)

// ttyRun runs argv on a new terminal, writes input to it and ends it with ttyInput.Close, as
// the daemon does at a client's end of stdin, and returns the terminal's output and the exit
// code. A program that never sees the end of its input fails the test after hangLimit.
func ttyRun(t *testing.T, input string, argv ...string) (string, int) {
	t.Helper()
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "TERM=xterm", "HOME=" + t.TempDir(), "INPUTRC=/dev/null"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close() // the master sees EIO once the program's copies are gone

	var out bytes.Buffer
	var reading sync.WaitGroup
	reading.Go(func() { _, _ = io.Copy(&out, master) })
	done := make(chan struct{})
	in := &ttyInput{master: master, done: done}
	if _, err := io.WriteString(in, input); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-exited:
	case <-time.After(hangLimit):
		cmd.Process.Kill()
		<-exited
		close(done)
		reading.Wait()
		t.Fatalf("%q with input %q still ran %s after the end of its input; its terminal shows:\n%q", argv, input, hangLimit, out.String())
	}
	close(done)
	reading.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		code = ee.ExitCode()
	} else if werr != nil {
		t.Fatal(werr)
	}
	return out.String(), code
}

// hangLimit is how long a test gives a program to end after its input did: a bound on a hang,
// far beyond what ending takes on a loaded machine.
const hangLimit = 30 * time.Second

// The end of a terminal's input reaches programs that read lines and programs that take the
// terminal raw once the input has ended (bash's line editor), after a last line with or without
// a newline; and a program that reads again after the end finds it again, as from a pipe.
func TestTTYInputEndsTheInput(t *testing.T) {
	bash := testenv.RequireTool(t, "bash")
	for _, tt := range []struct {
		name  string
		input string
		argv  []string
		code  int
		want  string
	}{
		{"bash, no input", "", []string{bash, "--norc", "--noprofile"}, 0, "exit"},
		{"bash, a script", "echo hi-$((1+2))\n", []string{bash, "--norc", "--noprofile"}, 0, "hi-3"},
		{"bash, a script that exits", "echo hi-$((2+2))\nexit 3\n", []string{bash, "--norc", "--noprofile"}, 3, "hi-4"},
		{"read, no input", "", []string{"sh", "-c", `read line; echo "read: $?"`}, 0, "read: 1"},
		{"read, a line without a newline", "abc", []string{"sh", "-c", `read line; echo "got $line"; read line; echo "then $?"`}, 0, "got abc\r\nthen 1"},
		{"cat twice", "x\n", []string{"sh", "-c", "cat; cat; echo done"}, 0, "done"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, code := ttyRun(t, tt.input, tt.argv...)
			if code != tt.code || !strings.Contains(out, tt.want) {
				t.Errorf("exit %d, terminal %q; want exit %d and %q", code, out, tt.code, tt.want)
			}
		})
	}
}

// A program reading the terminal raw takes ^D as a key: it gets a few, not one per read for as
// long as it runs. This one reads until half a second passes without input.
func TestTTYInputTypesFewKeysToARawReader(t *testing.T) {
	out, code := ttyRun(t, "", "sh", "-c", "stty raw -echo min 0 time 5; od -An -tx1 -v")
	if code != 0 {
		t.Fatalf("exit %d, terminal %q", code, out)
	}
	n := strings.Count(out, "04")
	if n < 1 || n > rawEOFs {
		t.Errorf("the raw reader read %q: %d ^D, want 1 to %d", out, n, rawEOFs)
	}
}

// Without TIOCGPTPEER's answer (not a PTY master here), Close still types one ^D and returns.
func TestTTYInputWithoutAPeer(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	in := &ttyInput{master: w, done: make(chan struct{})}
	in.Close()
	var b [1]byte
	if _, err := io.ReadFull(r, b[:]); err != nil || b[0] != 4 {
		t.Errorf("read %q, %v; want one ^D", b, err)
	}
}
