package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Registry is a docker-registry (Debian's package docker-registry) serving on a free loopback
// port, for the tests that push and pull images.
type Registry struct {
	// Addr is its host:port.
	Addr string
	cmd  *exec.Cmd
	log  *os.File
}

// StartRegistry runs the docker-registry binary bin with its configuration, storage and log in
// dir; with a login ("USER:PASSWORD") it takes only that user. It returns once the registry
// listens, or fails when deadline fires (nil: never) with what the registry logged.
func StartRegistry(bin, dir, login string, deadline <-chan time.Time) (*Registry, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)
	if login != "" {
		// htpasswd with one user, bcrypt: the only hash the registry takes.
		user, pass, ok := strings.Cut(login, ":")
		if !ok {
			return nil, fmt.Errorf("registry login %q: want USER:PASSWORD", login)
		}
		hash, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
		if err != nil {
			return nil, err
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(user+":"+string(hash)+"\n"), 0o600); err != nil {
			return nil, err
		}
		conf += fmt.Sprintf("auth:\n  htpasswd:\n    realm: hiloop-test\n    path: %s\n", htpasswd)
	}
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return nil, err
	}
	r := &Registry{Addr: addr, cmd: exec.Command(bin, "serve", cfg), log: logf}
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return r, nil
		}
		select {
		case <-deadline:
			r.Stop()
			b, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("docker-registry did not listen on %s: %s", addr, b)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop kills the registry and waits for it to go.
func (r *Registry) Stop() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.log.Close()
}
