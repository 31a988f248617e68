//go:build linux

package runtime

import (
	goruntime "runtime"
	"slices"
	"testing"

	"github.com/opencontainers/runc/libcontainer/seccomp"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// verdict evaluates profile for one call as the kernel would (first matching rule, else the
// default), for the comparisons the profile uses: "allow", "errno N" or "unsupported".
func verdict(profile *specs.LinuxSeccomp, name string, args ...uint64) string {
	for _, rule := range profile.Syscalls {
		if !slices.Contains(rule.Names, name) || !argsMatch(rule.Args, args) {
			continue
		}
		return action(rule.Action, rule.ErrnoRet)
	}
	return action(profile.DefaultAction, profile.DefaultErrnoRet)
}

func argsMatch(conds []specs.LinuxSeccompArg, args []uint64) bool {
	for _, c := range conds {
		var v uint64
		if int(c.Index) < len(args) {
			v = args[c.Index]
		}
		var ok bool
		switch c.Op {
		case specs.OpEqualTo:
			ok = v == c.Value
		case specs.OpLessThan:
			ok = v < c.Value
		case specs.OpNotEqual:
			ok = v != c.Value
		case specs.OpGreaterThan:
			ok = v > c.Value
		case specs.OpMaskedEqual:
			ok = v&c.Value == c.ValueTwo
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

func action(a specs.LinuxSeccompAction, errno *uint) string {
	switch {
	case a == specs.ActAllow:
		return "allow"
	case a == specs.ActErrno && errno != nil:
		return unix.ErrnoName(unix.Errno(*errno))
	default:
		return "unsupported " + string(a)
	}
}

func TestSeccompVerdicts(t *testing.T) {
	p := seccompProfile()
	for _, tc := range []struct {
		name string
		args []uint64
		want string
	}{
		{"read", nil, "allow"},
		{"execve", nil, "allow"},
		{"ptrace", nil, "allow"},
		{"io_setup", nil, "allow"},
		{"socket", []uint64{unix.AF_INET, unix.SOCK_STREAM}, "allow"},
		{"socket", []uint64{unix.AF_INET6, unix.SOCK_DGRAM}, "allow"},
		{"socket", []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, "allow"},
		{"socket", []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}, "allow"},
		{"socket", []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT}, "EPROTONOSUPPORT"},
		{"socket", []uint64{unix.AF_PACKET, unix.SOCK_RAW, unix.NETLINK_AUDIT}, "EPERM"},
		{"socket", []uint64{unix.AF_INET, unix.SOCK_RAW, unix.NETLINK_AUDIT}, "allow"},
		{"socket", []uint64{unix.AF_ALG, unix.SOCK_SEQPACKET}, "EPERM"},
		{"socket", []uint64{unix.AF_NFC, unix.SOCK_RAW}, "allow"},
		{"socket", []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, "EPERM"},
		{"socket", []uint64{unix.AF_KCM, unix.SOCK_DGRAM}, "allow"},
		{"personality", []uint64{0}, "allow"},
		{"personality", []uint64{0xffffffff}, "allow"},
		{"personality", []uint64{0x8}, "allow"},
		{"personality", []uint64{0x0040000}, "EPERM"}, // ADDR_NO_RANDOMIZE
		{"personality", []uint64{0x0400000}, "EPERM"}, // READ_IMPLIES_EXEC
		{"clone", []uint64{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD}, "allow"},
		{"clone", []uint64{uint64(unix.SIGCHLD)}, "allow"},
		{"clone", []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, "EPERM"},
		{"clone", []uint64{unix.CLONE_NEWNS}, "EPERM"},
		{"clone", []uint64{unix.CLONE_NEWCGROUP}, "EPERM"},
		{"clone3", nil, "ENOSYS"},
		{"unshare", nil, "EPERM"},
		{"clock_adjtime", nil, "EPERM"},
		{"listmount", nil, "EPERM"},
		{"a_call_from_the_future", nil, "EPERM"},
	} {
		if got := verdict(p, tc.name, tc.args...); got != tc.want {
			t.Errorf("%s%v: %s, want %s", tc.name, tc.args, got, tc.want)
		}
	}
	if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != uint(unix.EPERM) {
		t.Errorf("default action %s %v, want EPERM", p.DefaultAction, p.DefaultErrnoRet)
	}
}

// The calls that create namespaces or mounts, load kernel code or reach its riskiest
// interfaces are allowed by no rule, however defaultCaps changes.
func TestSeccompNeverAllows(t *testing.T) {
	p := seccompProfile()
	for _, rule := range p.Syscalls {
		if rule.Action != specs.ActAllow {
			continue
		}
		for _, name := range rule.Names {
			if slices.Contains(neverSyscalls, name) {
				t.Errorf("%s is allowed", name)
			}
		}
	}
	for _, g := range capabilitySyscalls {
		for _, name := range g.names {
			if slices.Contains(neverSyscalls, name) {
				t.Errorf("%s would be allowed with %s", name, g.capability)
			}
		}
	}
}

// A call moby allows only with a capability is allowed exactly when the sandbox holds it.
func TestSeccompFollowsCapabilities(t *testing.T) {
	p := seccompProfile()
	for _, tc := range []struct {
		name, capability string
	}{
		{"chroot", "CAP_SYS_CHROOT"},
		{"kcmp", "CAP_SYS_PTRACE"},
		{"mbind", "CAP_SYS_NICE"},
		{"settimeofday", "CAP_SYS_TIME"},
		{"vhangup", "CAP_SYS_TTY_CONFIG"},
	} {
		want := "EPERM"
		if slices.Contains(defaultCaps, tc.capability) {
			want = "allow"
		}
		if got := verdict(p, tc.name); got != want {
			t.Errorf("%s: %s, want %s (the sandbox holds %s: %t)", tc.name, got, want, tc.capability, want == "allow")
		}
	}
	for _, c := range []string{"CAP_NET_RAW", "CAP_AUDIT_WRITE", "CAP_SYS_ADMIN", "CAP_SYS_PTRACE"} {
		if slices.Contains(defaultCaps, c) {
			t.Errorf("sandboxes hold %s", c)
		}
	}
}

// BenchmarkSeccompLoad measures what every sandbox start pays for its filter: libseccomp's
// compile and the load, on a thread thrown away afterwards (the filter stays on it).
func BenchmarkSeccompLoad(b *testing.B) {
	cfg, err := specconv.SetupSeccomp(seccompProfile())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		done := make(chan error)
		go func() {
			goruntime.LockOSThread() // never unlocked: the thread ends with the goroutine
			fd, err := seccomp.InitSeccomp(cfg)
			if fd >= 0 {
				unix.Close(fd)
			}
			done <- err
		}()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}
