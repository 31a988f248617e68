//go:build linux

package runtime

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestDialLoopback(t *testing.T) {
	r := newRuntime(t)
	s := testSpec("dial")
	startSandbox(t, r, s)
	ctx := context.Background()

	srv, err := r.Exec(ctx, s.ID, ExecSpec{Argv: []string{"python3", "-m", "http.server", "--bind", "127.0.0.1", "8000"}, Dir: "/etc", User: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Kill(); _, _ = srv.Wait() })
	go func() { _, _ = io.Copy(io.Discard, srv.Stdout()) }()
	go func() { _, _ = io.Copy(io.Discard, srv.Stderr()) }()

	// A host listener on the same loopback address: a dial that leaked into the host's
	// namespace would reach it.
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	hostPort := host.Addr().(*net.TCPAddr).Port
	accepted := make(chan struct{}, 100)
	go func() {
		for {
			c, err := host.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()

	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return r.DialLoopback(ctx, s.ID, addr)
		},
	}}
	get := func(addr string) (string, error) {
		resp, err := client.Get("http://" + addr + "/")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := get("127.0.0.1:8000")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("http.server in the sandbox never answered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, addr := range []string{"127.0.0.1:8000", "localhost:8000"} {
		body, err := get(addr)
		if err != nil || !strings.Contains(body, "passwd") {
			t.Errorf("GET http://%s/ = %q, %v; want the listing of /etc", addr, body, err)
		}
	}

	refused := []string{"127.0.0.1:8001", "[::1]:8000", "localhost:8001", net.JoinHostPort("127.0.0.1", strconv.Itoa(hostPort))}
	for _, addr := range refused {
		c, err := r.DialLoopback(ctx, s.ID, addr)
		if err == nil {
			c.Close()
			t.Errorf("DialLoopback(%s) connected, want connection refused", addr)
		} else if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EADDRNOTAVAIL) && !errors.Is(err, syscall.ENETUNREACH) {
			t.Errorf("DialLoopback(%s) = %v, want connection refused", addr, err)
		}
	}

	// Every dial's thread died with its namespace: dials on the host still reach the host.
	for range 20 {
		if c, err := r.DialLoopback(ctx, s.ID, "127.0.0.1:8000"); err == nil {
			c.Close()
		}
		c, err := net.Dial("tcp", host.Addr().String())
		if err != nil {
			t.Fatalf("dial the host after DialLoopback: %v", err)
		}
		c.Close()
	}
	for range 20 {
		select {
		case <-accepted:
		case <-time.After(5 * time.Second):
			t.Fatal("host listener missed a host dial")
		}
	}
	select {
	case <-accepted:
		t.Error("a DialLoopback reached the host's loopback")
	case <-time.After(100 * time.Millisecond):
	}

	for _, addr := range []string{"10.0.0.1:80", "192.0.2.1:80", "example.com:80", "127.0.0.2:80", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:99999", "[::ffff:127.0.0.1]:80", ":80"} {
		if c, err := r.DialLoopback(ctx, s.ID, addr); err == nil {
			c.Close()
			t.Errorf("DialLoopback(%q) connected, want an invalid address error", addr)
		} else if !strings.Contains(err.Error(), "runtime: dial: ") {
			t.Errorf("DialLoopback(%q) = %v, want an invalid address error", addr, err)
		}
	}
	if _, err := r.DialLoopback(ctx, "never-started", "127.0.0.1:8000"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("DialLoopback in an unknown sandbox: %v, want ErrNotRunning", err)
	}
}
