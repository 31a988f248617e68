package soak

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/daemon"
	"github.com/hiloop/hiloop/internal/hostleaks"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/testenv"
)

// The short soak runs in `make test`; `make soak` passes larger values.
var (
	kills       = flag.Int("soak.kills", 6, "kill sandboxd this many times")
	duration    = flag.Duration("soak.duration", 0, "end the soak after this long even with fewer kills (0: no bound)")
	concurrency = flag.Int("soak.concurrency", 2, "clients running operations at once")
	seed        = flag.Uint64("soak.seed", 0, "seed of the operations and the kills (0: from the clock; printed)")
	aimed       = flag.Float64("soak.aimed", 0.75, "share of kills aimed 0-200 ms into a single operation")
	trace       = flag.Bool("soak.trace", false, "print every call and its outcome")
	floodConns  = flag.Int("flood.conns", 1500, "idle connections the flood opens")
	floodNoFile = flag.Int("flood.nofile", 2048, "the flooded daemon's descriptor limit (its unix socket holds an eighth)")
	floodSettle = flag.Duration("flood.settle", 2*time.Second, "how long after the flood the daemon's RSS is read")
)

// daemonEnv makes this test binary run as sandboxd, so that the soak drives the daemon's real
// main in a process of its own, with this build's race detector.
const daemonEnv = "HILOOP_SOAK_SANDBOXD"

// testImage is the image the soak's sandboxes start from.
const testImage = "minimal"

func TestMain(m *testing.M) {
	// The runtime re-executes the daemon's binary as each sandbox's container init.
	runtime.MaybeInit()
	if os.Getenv(daemonEnv) == "1" {
		os.Exit(daemon.Main())
	}
	os.Exit(m.Run())
}

// newDaemon builds hiloop-init and hiloop-fake-agent and the test image, and returns a daemon
// on a private directory that this test binary runs.
func newDaemon(t *testing.T) *Daemon {
	t.Helper()
	testenv.RequireRoot(t)
	bin := t.TempDir()
	for _, b := range []string{"hiloop-init", "hiloop-fake-agent"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, b), "github.com/hiloop/hiloop/cmd/"+b)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b, err, out)
		}
	}
	imagesDir := os.Getenv("HILOOP_TEST_IMAGES")
	if imagesDir == "" {
		imagesDir = "/var/cache/hiloop-test/images"
	}
	if _, err := (&images.Store{Dir: imagesDir}).Build(context.Background(), testImage, testWriter{t}); err != nil {
		t.Fatalf("build test image: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Unix socket paths are short: not under t.TempDir().
	dir, err := os.MkdirTemp("/tmp", "hlsoak")
	if err != nil {
		t.Fatal(err)
	}
	// Sandboxes' roots, unprivileged host ids, pass through it to their root filesystems.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	d := &Daemon{Command: []string{self}, Env: []string{daemonEnv + "=1"}, Dir: dir, ImagesDir: imagesDir,
		InitPath: filepath.Join(bin, "hiloop-init")}
	t.Cleanup(func() {
		d.Kill()
		if leaks := hostleaks.Find(d.DataDir()); len(leaks) > 0 || t.Failed() {
			t.Logf("kept %s (daemon log %s)", dir, d.LogPath())
			return
		}
		os.RemoveAll(dir)
	})
	return d
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestSoak kills sandboxd again and again under a mixed workload and fails on any violation
// the checks find. Its figures are logged; none is asserted.
func TestSoak(t *testing.T) {
	d := newDaemon(t)
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	ctx := context.Background()
	rep, err := Run(ctx, Config{Daemon: d, Image: testImage, Kills: *kills, Duration: *duration, Concurrency: *concurrency,
		Seed: s, Aimed: *aimed, Logf: t.Logf, Trace: *trace})
	t.Log(summary(rep))
	if err != nil {
		t.Fatalf("soak (seed %d): %v", s, err)
	}
	if rep.Kills == 0 || rep.Total() == 0 {
		t.Fatalf("soak (seed %d) made %d kills and %d operations: nothing was tested", s, rep.Kills, rep.Total())
	}
	for _, v := range rep.Violations {
		t.Errorf("seed %d: %s", s, v)
	}
}

// TestFlood opens more idle connections to the unix socket than the daemon holds and fails
// unless every `sandbox list` meanwhile and after is answered. Latency and memory are logged.
func TestFlood(t *testing.T) {
	d := newDaemon(t)
	d.NoFile = *floodNoFile
	rep, err := Flood(context.Background(), FloodConfig{Daemon: d, Image: testImage, Conns: *floodConns, Settle: *floodSettle, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("flood: %d connections opened, %d refused, %d still open (bound %d); %d lists, %d failed, p50 %s p99 %s max %s; RSS %d kB before, %d kB peak, %d kB after; fds %d before, %d peak, %d after",
		rep.Opened, rep.Refused, rep.Open, rep.Bound, rep.Lists, rep.ListErrors, rep.P50, rep.P99, rep.Max,
		rep.RSSBefore, rep.RSSPeak, rep.RSSAfter, rep.FDsBefore, rep.FDsPeak, rep.FDsAfter)
	if rep.Opened+rep.Refused <= rep.Bound {
		t.Fatalf("the flood tried %d connections, not more than the bound %d", rep.Opened+rep.Refused, rep.Bound)
	}
	if rep.Lists == 0 || rep.ListErrors > 0 {
		t.Errorf("%d of %d lists failed: %v", rep.ListErrors, rep.Lists, rep.Errors)
	}
	if rep.Open > rep.Bound {
		t.Errorf("%d flood connections were still open, more than the bound %d", rep.Open, rep.Bound)
	}
}

// summary is a run's figures in a few lines.
func summary(r Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d operations, %d kills (%d aimed), %d interrupted, %d retried with their key, %d receipts repeated, %d violations, %s\n",
		r.Seed, r.Total(), r.Kills, r.Aimed, r.Interrupted, r.Retried, r.Replays, len(r.Violations), r.Duration.Round(time.Second))
	kinds := make([]string, 0, len(r.Operations))
	for k := range r.Operations {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "  %-16s %d\n", k, r.Operations[k])
	}
	return b.String()
}
