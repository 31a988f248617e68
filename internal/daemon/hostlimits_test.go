//go:build linux

package daemon

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/pkg/api"
)

// fakeProc is a stand-in for /proc with the given sysctls (path under sys → value) and a
// meminfo of memKB.
func fakeProc(t *testing.T, memKB uint64, sysctls map[string]uint64) string {
	t.Helper()
	dir := t.TempDir()
	for path, v := range sysctls {
		p := filepath.Join(dir, "sys", path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(strconv.FormatUint(v, 10)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	meminfo := "MemTotal:       " + strconv.FormatUint(memKB, 10) + " kB\nMemFree:         1000 kB\n"
	if err := os.WriteFile(filepath.Join(dir, "meminfo"), []byte(meminfo), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// This machine's limits before sandboxd: the kernel's defaults for 24 GiB.
func defaultSysctls() map[string]uint64 {
	return map[string]uint64{
		"kernel/pid_max":     32768,
		"kernel/threads-max": 192730,
		"kernel/pty/max":     4096,
		"kernel/pty/reserve": 1024,
		"fs/aio-max-nr":      65536,
	}
}

func testHost(t *testing.T, proc string) (hostLimits, *bytes.Buffer) {
	var log bytes.Buffer
	return hostLimits{proc: proc, log: slog.New(slog.NewTextHandler(&log, nil))}, &log
}

func readSysctl(t *testing.T, h hostLimits, path string) uint64 {
	t.Helper()
	v, err := h.read(path)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// raise lifts every limit below its target to it and logs before and after; it never lowers
// one that is higher already.
func TestRaiseHostLimits(t *testing.T) {
	sysctls := defaultSysctls()
	sysctls["kernel/threads-max"] = 8_000_000 // higher than sandboxd needs: kept
	h, log := testHost(t, fakeProc(t, 24_684_092, sysctls))
	h.raise()
	want := map[string]uint64{
		"kernel/pid_max":     4194304,
		"kernel/threads-max": 8_000_000,
		"kernel/pty/max":     1048576,
		"kernel/pty/reserve": 1024,
		"fs/aio-max-nr":      24_684_092 * 1024 / 64,
	}
	for path, v := range want {
		if got := readSysctl(t, h, path); got != v {
			t.Errorf("%s = %d, want %d", path, got, v)
		}
	}
	for _, line := range []string{
		"sysctl=kernel.pid_max before=32768 after=4194304",
		"sysctl=kernel.pty.max before=4096 after=1048576",
		"sysctl=fs.aio-max-nr before=65536 after=394945472",
	} {
		if !strings.Contains(log.String(), line) {
			t.Errorf("log lacks %q:\n%s", line, log)
		}
	}
	h.logRoom()
	if !strings.Contains(log.String(), "max_running=1020 bound_by=kernel.pid_max") {
		t.Errorf("log lacks the room the raised limits leave:\n%s", log)
	}
	if strings.Contains(log.String(), "threads-max") {
		t.Errorf("a limit that was high enough was logged:\n%s", log)
	}
}

// A limit that cannot be written is left, with a warning naming it; the others are raised.
func TestRaiseSkipsUnwritable(t *testing.T) {
	proc := fakeProc(t, 1<<20, defaultSysctls())
	h, log := testHost(t, proc)
	// Root writes through any file mode, but not through a read-only sysctl's: the stand-in
	// for kernel.pid_max reads a small number and refuses writes.
	pidMax := filepath.Join(proc, "sys", "kernel", "pid_max")
	if err := os.Remove(pidMax); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/proc/sys/kernel/cap_last_cap", pidMax); err != nil {
		t.Fatal(err)
	}
	h.raise()
	if !strings.Contains(log.String(), `level=WARN msg="cannot raise a host limit: sandboxes are admitted against it as it is" sysctl=kernel.pid_max`) {
		t.Errorf("no warning for the unwritable kernel.pid_max:\n%s", log)
	}
	if got := readSysctl(t, h, "kernel/pty/max"); got != 1048576 {
		t.Errorf("kernel/pty/max = %d after a failure elsewhere, want raised", got)
	}
}

func TestSandboxRoom(t *testing.T) {
	for _, tc := range []struct {
		size, reserve, share, want uint64
	}{
		{4194304, hostPidsReserve, runtime.PidsPerSandbox, 1020}, // issue 15's 1,000 idle sandboxes fit
		{32768, hostPidsReserve, runtime.PidsPerSandbox, 4},
		{16384, hostPidsReserve, runtime.PidsPerSandbox, 0},
		{1000, hostPidsReserve, runtime.PidsPerSandbox, 0}, // below the reserve: none, no wrap
		{1048576, hostPtysReserve + 1024, runtime.PtysPerSandbox, 1022},
		{4096, hostPtysReserve + 1024, runtime.PtysPerSandbox, 2},
	} {
		if got := sandboxRoom(tc.size, tc.reserve, tc.share); got != tc.want {
			t.Errorf("sandboxRoom(%d, %d, %d) = %d, want %d", tc.size, tc.reserve, tc.share, got, tc.want)
		}
	}
}

// AdmitStart refuses the start that would not fit the smallest pool, naming it, and reads the
// limits afresh each time.
func TestAdmitStart(t *testing.T) {
	sysctls := defaultSysctls()
	sysctls["kernel/pid_max"] = 4194304
	sysctls["kernel/threads-max"] = 4194304
	sysctls["kernel/pty/max"] = 1048576
	h, _ := testHost(t, fakeProc(t, 1<<20, sysctls))
	if err := h.AdmitStart(1019); err != nil {
		t.Errorf("the 1,020th sandbox: %v", err)
	}
	err := h.AdmitStart(1020)
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Code != api.CodeHostLimitReached || !strings.Contains(err.Error(), "kernel.pid_max of 4194304 has room for 1020") {
		t.Errorf("the 1,021st sandbox: %v, want host_limit_reached naming kernel.pid_max", err)
	}
	// threads-max lowered by an operator: it binds now.
	if err := h.write("kernel/threads-max", 100000); err != nil {
		t.Fatal(err)
	}
	err = h.AdmitStart(20)
	if !errors.As(err, &apiErr) || !strings.Contains(err.Error(), "kernel.threads-max of 100000 has room for 20") {
		t.Errorf("with threads-max 100000: %v, want kernel.threads-max named", err)
	}
	// Unraised ptys: the host's reserve and kernel.pty.reserve leave room for two.
	if err := h.write("kernel/pty/max", 4096); err != nil {
		t.Fatal(err)
	}
	if err := h.AdmitStart(1); err != nil {
		t.Errorf("second sandbox under pty.max 4096: %v", err)
	}
	if err := h.AdmitStart(2); err == nil || !strings.Contains(err.Error(), "kernel.pty.max") {
		t.Errorf("third sandbox under pty.max 4096: %v, want kernel.pty.max named", err)
	}
}

func TestFitResources(t *testing.T) {
	for _, tc := range []struct {
		name            string
		cpus            float64
		mem             int
		defCPUs, defMem bool
		refused         []string // fields refused before the fit
		wantCPUs        float64
		wantMem         int
		wantErr         string
		wantFields      []string
	}{
		{name: "fits", cpus: 2, mem: 2048, wantCPUs: 2, wantMem: 2048},
		{name: "cpus over", cpus: 3, mem: 2048, wantErr: "invalid cpus 3: this host has 2 CPUs: use 0.1 to 2", wantFields: []string{"cpus"}},
		{name: "memory over", cpus: 1, mem: 9000, wantErr: "invalid memory_mb 9000: this host has 8000 MiB of memory: use 64 to 8000", wantFields: []string{"memory_mb"}},
		{name: "both over, both said", cpus: 4, mem: 9000,
			wantErr:    "2 problems: invalid cpus 4: this host has 2 CPUs: use 0.1 to 2; invalid memory_mb 9000: this host has 8000 MiB of memory: use 64 to 8000",
			wantFields: []string{"cpus", "memory_mb"}},
		{name: "a field refused already is not refused twice", cpus: 400, mem: 9000, refused: []string{"cpus"},
			wantFields: []string{"cpus", "memory_mb"}},
		{name: "defaults capped", cpus: 4, mem: 9000, defCPUs: true, defMem: true, wantCPUs: 2, wantMem: 8000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := api.SandboxesPost{CPUs: tc.cpus, MemoryMB: tc.mem}
			var ps api.Problems
			for _, f := range tc.refused {
				ps.Addf(f, api.CodeInvalidArgument, "invalid %s: out of range", f)
			}
			fitResources(&p, 2, 8000, tc.defCPUs, tc.defMem, &ps)
			err := ps.Err()
			if tc.wantFields != nil {
				var apiErr *api.Error
				if !errors.As(err, &apiErr) || apiErr.Code != api.CodeInvalidArgument || (tc.wantErr != "" && apiErr.Message != tc.wantErr) {
					t.Fatalf("err = %v, want invalid_argument %q", err, tc.wantErr)
				}
				var fields []string
				for _, d := range apiErr.Details {
					fields = append(fields, d.Field)
				}
				if !slices.Equal(fields, tc.wantFields) {
					t.Errorf("fields %v, want %v", fields, tc.wantFields)
				}
				return
			}
			if err != nil || p.CPUs != tc.wantCPUs || p.MemoryMB != tc.wantMem {
				t.Errorf("got %g CPUs %d MiB (%v), want %g and %d", p.CPUs, p.MemoryMB, err, tc.wantCPUs, tc.wantMem)
			}
		})
	}
}
