package sshd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/hiloop/hiloop/internal/atomicfile"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/runtime"
)

type noSandboxes struct{}

func (noSandboxes) Exists(string) bool { return false }
func (noSandboxes) Exec(context.Context, string, runtime.ExecSpec) (runtime.Process, error) {
	return nil, runtime.ErrNotRunning
}
func (noSandboxes) DialLoopback(context.Context, string, string) (net.Conn, error) {
	return nil, runtime.ErrNotRunning
}

type noKeys struct{}

func (noKeys) Owner(gossh.PublicKey) (identity.Principal, bool) { return identity.Principal{}, false }

func TestHostKeyKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys", "ssh_host_ed25519_key")
	keyOf := func() gossh.PublicKey {
		t.Helper()
		s, err := New(Config{Listen: "127.0.0.1:0", HostKeyPath: path, Sandboxes: noSandboxes{}, Keys: noKeys{}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.Serve(ctx); err != nil {
			t.Fatal(err)
		}
		return s.HostKey()
	}
	first := keyOf()
	if first.Type() != gossh.KeyAlgoED25519 {
		t.Errorf("host key type %s, want ed25519", first.Type())
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("host key file: %v, %v; want mode 0600", st.Mode(), err)
	}
	if second := keyOf(); !bytes.Equal(first.Marshal(), second.Marshal()) {
		t.Error("the host key changed between two servers")
	}
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Listen: "127.0.0.1:0", HostKeyPath: path, Sandboxes: noSandboxes{}, Keys: noKeys{}}); err == nil {
		t.Error("New with a corrupt host key succeeded")
	}
}

// A key that reached its path but whose directory fsync failed is served, with a warning; any
// other failure to write it stops the start.
func TestHostKeyWriteFails(t *testing.T) {
	injected := errors.New("injected")
	t.Cleanup(func() { writeNewFile = atomicfile.WriteNewFile })
	for _, tc := range []struct {
		name  string
		write func(string, []byte, fs.FileMode) error
		start bool
	}{
		{"not durable", func(path string, data []byte, perm fs.FileMode) error {
			if err := atomicfile.WriteNewFile(path, data, perm); err != nil {
				return err
			}
			return fmt.Errorf("%s: %w: %w", path, atomicfile.ErrNotDurable, injected)
		}, true},
		{"not written", func(string, []byte, fs.FileMode) error { return injected }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeNewFile = tc.write
			path := filepath.Join(t.TempDir(), "ssh_host_ed25519_key")
			var log bytes.Buffer
			s, err := New(Config{Listen: "127.0.0.1:0", HostKeyPath: path, Sandboxes: noSandboxes{}, Keys: noKeys{},
				Log: slog.New(slog.NewTextHandler(&log, nil))})
			if !tc.start {
				if !errors.Is(err, injected) {
					t.Fatalf("New: %v, want the injected error", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v, want a start with the key in place", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := s.Serve(ctx); err != nil { // closes the listener
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			onDisk, err := gossh.ParsePrivateKey(b)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(onDisk.PublicKey().Marshal(), s.HostKey().Marshal()) {
				t.Error("the server serves a key other than the one at its path")
			}
			if !bytes.Contains(log.Bytes(), []byte("not yet durable")) {
				t.Errorf("log %q does not warn that the key is not yet durable", log.Bytes())
			}
		})
	}
}

func TestSignalNames(t *testing.T) {
	for name, n := range map[string]int{"HUP": 1, "INT": 2, "KILL": 9, "TERM": 15, "USR1": 10, "USR2": 12, "WINCH": 28} {
		if got := signalNumber(name); got != n {
			t.Errorf("signalNumber(%s) = %d, want %d", name, got, n)
		}
		if got := signalName(n); got != name {
			t.Errorf("signalName(%d) = %s, want %s", n, got, name)
		}
	}
	if signalNumber("SIGTERM") != 0 || signalNumber("") != 0 {
		t.Error("names with SIG or empty must not map to a signal")
	}
	if got := signalName(40); got != "SIG40@hiloop" {
		t.Errorf("signalName(40) = %s", got)
	}
}

// TestResolve: a key's SSH user name names a sandbox of its owner; USER.NAME reaches another
// user's only for an admin's key.
func TestResolve(t *testing.T) {
	admin, bob := identity.Local(), identity.Principal{User: "bob"}
	for _, c := range []struct {
		owner identity.Principal
		user  string
		want  string
		ok    bool
	}{
		{admin, "box", "box", true},
		{admin, "bob.box", "bob.box", true},
		{admin, "admin.box", "box", true},
		{bob, "box", "bob.box", true},
		{bob, "bob.box", "bob.box", true},
		{bob, "admin.box", "", false},
		{bob, "carol.box", "", false},
		{bob, "Box", "", false},
		{bob, "bob.", "", false},
		{bob, ".box", "", false},
		{admin, "bob.box.x", "", false},
		{identity.Principal{User: "alice", Admin: true}, "box", "alice.box", true},
		{identity.Principal{User: "alice", Admin: true}, "admin.box", "box", true},
	} {
		if got, ok := Resolve(c.owner, c.user); got != c.want || ok != c.ok {
			t.Errorf("Resolve(%+v, %q) = %q, %v; want %q, %v", c.owner, c.user, got, ok, c.want, c.ok)
		}
	}
}
