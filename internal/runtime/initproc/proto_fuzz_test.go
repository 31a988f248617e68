//go:build linux

package initproc

import (
	"encoding/json"
	"net"
	"os"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// packetPair returns a Conn and the raw descriptor of its peer, so a test can send any bytes,
// and a func that closes both.
func packetPair(t *testing.T) (*Conn, int, func()) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := connFromFD(t, fds[0])
	if err := c.UnixConn().SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return c, fds[1], func() {
		c.Close()
		unix.Close(fds[1])
	}
}

// connPair returns two connected Conns, closed when t ends.
func connPair(t *testing.T) (a, b *Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b = connFromFD(t, fds[0]), connFromFD(t, fds[1])
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// FuzzRecv feeds Recv one packet of arbitrary bytes carrying nfds descriptors, as a peer that
// does not follow the protocol would send it. Recv must not panic or leak a descriptor, and a
// message it accepts came from valid JSON and survives Send and Recv unchanged.
func FuzzRecv(f *testing.F) {
	for _, s := range []string{
		`{"op":"ping"}`, `{"op":"pong"}`, `{"op":"started","pid":42}`,
		`{"op":"exit","code":127,"error":"exec: \"nope\": not found"}`, `{"op":"exit","code":0,"signal":9}`,
		`{"op":"signal","signal":15}`, `{"op":"kill"}`,
		`{"op":"exec","exec":{"argv":["sh","-c","echo hi"],"env":["A=b"],"dir":"/workspace","user":"agent","tty":true,"rows":24,"cols":80}}`,
		`{"op":"exec","exec":null}`, `{"op":"exit","code":1e99}`, `{"op":"started","pid":"1"}`,
		``, `{`, `null`, `[]`, `{"op":"ping"} {"op":"ping"}`, "{\"op\":\"\xff\"}",
	} {
		for _, n := range []uint8{0, 1, 3, 4} {
			f.Add([]byte(s), n)
		}
	}
	// The first connection starts the runtime's poller, whose descriptors stay open.
	if fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0); err == nil {
		f := os.NewFile(uintptr(fds[0]), "warm-up")
		if c, err := net.FileConn(f); err == nil {
			c.Close()
		}
		f.Close()
		unix.Close(fds[1])
	}
	f.Fuzz(func(t *testing.T, packet []byte, nfds uint8) {
		before := openFDs(t)
		c, peer, closePair := packetPair(t)
		var oob []byte
		if n := int(nfds % 6); n > 0 {
			fds := make([]int, n)
			for i := range fds {
				fds[i] = peer // any descriptor will do; the receiver gets its own copies
			}
			oob = unix.UnixRights(fds...)
		}
		if err := unix.Sendmsg(peer, packet, oob, nil, 0); err != nil {
			closePair()
			t.Skipf("send %d bytes: %v", len(packet), err)
		}
		var m Message
		files, err := c.Recv(&m)
		if len(files) > int(nfds%6) {
			t.Fatalf("received %d files, %d were sent", len(files), nfds%6)
		}
		closeAll(files)
		if err == nil {
			if !json.Valid(packet) {
				t.Fatalf("accepted %q, which is not JSON", packet)
			}
			// What was accepted goes back out and in again unchanged.
			want, _ := json.Marshal(m)
			var again Message
			a, b := connPair(t)
			if err := a.Send(&m); err != nil {
				t.Fatalf("send %s: %v", want, err)
			}
			files, err := b.Recv(&again)
			if got, _ := json.Marshal(again); err != nil || len(files) != 0 || string(got) != string(want) {
				t.Fatalf("round trip: sent %s, got %s, %d files, %v", want, got, len(files), err)
			}
			a.Close()
			b.Close()
		} else if len(files) != 0 {
			t.Fatalf("Recv failed (%v) and still returned %d files", err, len(files))
		}
		closePair()
		if after := openFDs(t); after != before {
			t.Fatalf("%d descriptors open before, %d after", before, after)
		}
	})
}

// FuzzMessageRoundTrip sends well-formed messages and checks they arrive as they were sent.
// Strings must be valid UTF-8: JSON carries text, and Go replaces an invalid byte with U+FFFD.
func FuzzMessageRoundTrip(f *testing.F) {
	f.Add(OpExec, true, "sh", "-c", "A=b", "/workspace", "agent", true, uint16(24), uint16(80), 0, 0, 0, "")
	f.Add(OpExec, true, "ls", "", "", "", "", false, uint16(0), uint16(0), 0, 0, 0, "")
	f.Add(OpStarted, false, "", "", "", "", "", false, uint16(0), uint16(0), 4242, 0, 0, "")
	f.Add(OpExit, false, "", "", "", "", "", false, uint16(0), uint16(0), 0, 9, 137, "")
	f.Add(OpExit, false, "", "", "", "", "", false, uint16(0), uint16(0), 0, 0, 127, `exec: "nope": executable file not found in $PATH`)
	f.Add(OpSignal, false, "", "", "", "", "", false, uint16(0), uint16(0), 0, -1, 0, "\u00e9\u2028\x00<>&")
	f.Fuzz(func(t *testing.T, op string, exec bool, arg0, arg1, env, dir, user string, tty bool, rows, cols uint16, pid, sig, code int, errText string) {
		for _, s := range []string{op, arg0, arg1, env, dir, user, errText} {
			if !utf8.ValidString(s) {
				t.Skip("not UTF-8")
			}
		}
		sent := Message{Op: op, Pid: pid, Signal: sig, Code: code, Error: errText}
		if exec {
			sent.Exec = &ExecRequest{Argv: []string{arg0, arg1}, Dir: dir, User: user, TTY: tty, Rows: rows, Cols: cols}
			if env != "" {
				sent.Exec.Env = []string{env}
			}
		}
		a, b := connPair(t)
		if err := a.Send(&sent); err != nil {
			t.Fatalf("send %+v: %v", sent, err)
		}
		var got Message
		files, err := b.Recv(&got)
		if err != nil || len(files) != 0 || !reflect.DeepEqual(sent, got) {
			t.Fatalf("sent %+v, got %+v, %d files, %v", sent, got, len(files), err)
		}
	})
}
