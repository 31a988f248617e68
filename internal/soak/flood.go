package soak

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hiloop/hiloop/internal/hostleaks"
	"github.com/hiloop/hiloop/pkg/api"
	"github.com/hiloop/hiloop/pkg/client"
)

// FloodConfig is one connection flood.
type FloodConfig struct {
	// Daemon is the sandboxd to flood (its NoFile sets the bound); Flood starts and stops it.
	Daemon *Daemon
	// Image is the image of the one sandbox the lists return.
	Image string
	// Conns is how many idle keep-alive connections the flood opens to the unix socket.
	Conns int
	// Settle is how long after the flood's connections are gone the RSS after is read.
	Settle time.Duration
	// Logf prints progress.
	Logf func(format string, args ...any)
}

// FloodReport is what a flood measured. RSS figures are kB (VmRSS).
type FloodReport struct {
	Bound                        int // the unix socket's connection bound: min(NoFile/8, 4096)
	Opened, Refused, Open        int // connections opened, failed to open, still open at the end
	Lists, ListErrors            int // `sandbox list` calls during and after the flood, failures
	P50, P99, Max                time.Duration
	RSSBefore, RSSPeak, RSSAfter int64
	FDsBefore, FDsPeak, FDsAfter int
	Errors                       []string // the first list errors, for the report
}

// Flood opens cfg.Conns idle keep-alive connections to the daemon's unix socket (each sends one
// request and then stays idle) while a client lists sandboxes on a new connection every 20 ms,
// as an operator's commands would; then it closes them and lists again.
func Flood(ctx context.Context, cfg FloodConfig) (FloodReport, error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	d := cfg.Daemon
	rep := FloodReport{Bound: min(d.NoFile/8, 4096)}
	if err := d.Start(ctx); err != nil {
		return rep, err
	}
	defer d.Stop()
	c, err := client.New(d.Host(), "")
	if err != nil {
		return rep, err
	}
	if _, err := c.CreateSandbox(ctx, api.SandboxesPost{Name: "flood", Image: cfg.Image, WorkspaceGiB: 1, NoStart: true}); err != nil {
		return rep, err
	}
	defer func() { _ = c.DeleteSandbox(context.WithoutCancel(ctx), "flood", true) }()
	pid := d.Pid()
	rep.RSSBefore, rep.FDsBefore = rss(pid), fds(pid)

	var (
		mu        sync.Mutex
		latencies []time.Duration
	)
	list := func() {
		lc, _ := client.New(d.Host(), "") // a new connection, as a new CLI command makes
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		t0 := time.Now()
		l, err := lc.ListSandboxes(lctx)
		took := time.Since(t0)
		mu.Lock()
		defer mu.Unlock()
		rep.Lists++
		switch {
		case err != nil:
			rep.ListErrors++
			if len(rep.Errors) < 5 {
				rep.Errors = append(rep.Errors, fmt.Sprintf("list after %s: %v", took.Round(time.Millisecond), err))
			}
		case len(l) != 1:
			rep.ListErrors++
			rep.Errors = append(rep.Errors, fmt.Sprintf("list returned %d sandboxes, want 1", len(l)))
		default:
			latencies = append(latencies, took)
		}
	}
	sample := func() {
		r, f := rss(pid), fds(pid)
		mu.Lock()
		rep.RSSPeak, rep.FDsPeak = max(rep.RSSPeak, r), max(rep.FDsPeak, f)
		mu.Unlock()
	}

	done := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			list()
			sample()
		}
	}()
	t0 := time.Now()
	conns := make([]net.Conn, 0, cfg.Conns)
	var cmu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for range cfg.Conns {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			conn, err := idleConn(ctx, d.Socket())
			cmu.Lock()
			defer cmu.Unlock()
			if err != nil {
				rep.Refused++
				return
			}
			conns = append(conns, conn)
		}()
	}
	wg.Wait()
	rep.Opened = len(conns)
	cfg.Logf("flood: %d connections opened (%d refused) in %s; the socket holds %d", rep.Opened, rep.Refused, time.Since(t0).Round(time.Millisecond), rep.Bound)
	_ = sleep(ctx, 3*time.Second) // the flood held while lists go on
	for _, conn := range conns {
		if stillOpen(conn) {
			rep.Open++
		}
		conn.Close()
	}
	close(done)
	bg.Wait()
	// After the flood: descriptors and memory go back (the daemon frees memory once the
	// connections are gone).
	for i := 0; i < 300 && fds(pid) > rep.FDsBefore+4; i++ {
		_ = sleep(ctx, 100*time.Millisecond)
	}
	_ = sleep(ctx, cfg.Settle)
	rep.FDsAfter, rep.RSSAfter = fds(pid), rss(pid)
	for range 20 {
		list()
	}
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		rep.P50, rep.P99, rep.Max = latencies[n/2], latencies[n*99/100], latencies[n-1]
	}
	return rep, nil
}

// idleConn opens a connection, sends one request on it and reads the answer, then leaves it
// idle: a keep-alive connection between requests.
func idleConn(ctx context.Context, socket string) (net.Conn, error) {
	conn, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	req, _ := http.NewRequest(http.MethodGet, "http://sandboxd/v1/version", nil)
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		conn.Close()
		return nil, err
	}
	resp.Body.Close()
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// stillOpen says whether the daemon has not closed conn.
func stillOpen(conn net.Conn) bool {
	_ = conn.SetReadDeadline(time.Now().Add(time.Millisecond))
	var b [1]byte
	_, err := conn.Read(b[:])
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// rss is a process's resident memory in kB (0 if it cannot be read).
func rss(pid int) int64 {
	status, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	kb, _ := strconv.ParseInt(strings.TrimSuffix(hostleaks.StatusField(string(status), "VmRSS"), " kB"), 10, 64)
	return kb
}

// fds is how many descriptors a process holds.
func fds(pid int) int {
	entries, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	return len(entries)
}
