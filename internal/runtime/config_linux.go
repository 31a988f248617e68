//go:build linux

package runtime

import (
	"fmt"
	"hash/fnv"
	"maps"
	"os"
	"path"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// initPathInSandbox is where the host's hiloop-init is bind-mounted read-only.
const initPathInSandbox = "/.hiloop/init"

// ToolsDirInSandbox is where Config.Tools are bind-mounted read-only, one file each.
const ToolsDirInSandbox = "/.hiloop/bin"

// defaultCaps is Docker's default capability set: enough for sudo, apt and chown, not enough
// to mount, load modules, trace across the host or change the clock.
var defaultCaps = []string{
	"CAP_CHOWN",
	"CAP_DAC_OVERRIDE",
	"CAP_FSETID",
	"CAP_FOWNER",
	"CAP_MKNOD",
	"CAP_NET_RAW",
	"CAP_SETGID",
	"CAP_SETUID",
	"CAP_SETFCAP",
	"CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT",
	"CAP_KILL",
	"CAP_AUDIT_WRITE",
}

// Docker's masked and read-only paths.
var (
	maskedPaths = []string{
		"/proc/asound",
		"/proc/acpi",
		"/proc/interrupts",
		"/proc/kcore",
		"/proc/keys",
		"/proc/latency_stats",
		"/proc/timer_list",
		"/proc/timer_stats",
		"/proc/sched_debug",
		"/proc/scsi",
		"/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	readonlyPaths = []string{
		"/proc/bus",
		"/proc/fs",
		"/proc/irq",
		"/proc/sys",
		"/proc/sysrq-trigger",
	}
)

// Limits that apply to every sandbox whatever its spec.
const (
	pidsLimit   = 8192
	nofileSoft  = 65536
	nofileHard  = 524288
	cpuPeriodUS = 100000
)

// cgroupName is the sandbox's cgroup, relative so it nests under the daemon's own cgroup. A
// hash of the state dir keeps two runtimes on one host (a daemon and a test) apart where their
// cgroups share a parent.
func cgroupName(stateDir, id string) string { return CgroupPrefix(stateDir) + id }

// CgroupPrefix starts the name of every sandbox cgroup of the runtime keeping its state in
// stateDir; the rest of the name is the sandbox id.
func CgroupPrefix(stateDir string) string {
	h := fnv.New32a()
	h.Write([]byte(stateDir))
	return fmt.Sprintf("hiloop-%08x-", h.Sum32())
}

// ociSpec describes the sandbox as an OCI runtime spec; rootfs is the mounted overlay.
func ociSpec(s Spec, rootfs string, cfg Config, cgroup string) *specs.Spec {
	ns := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace},
		{Type: specs.NetworkNamespace},
		{Type: specs.IPCNamespace},
		{Type: specs.UTSNamespace},
		{Type: specs.MountNamespace},
	}
	if cgroups.IsCgroup2UnifiedMode() {
		// What Docker does on v2: the sandbox sees its own cgroup as /sys/fs/cgroup.
		ns = append(ns, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	spec := &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: rootfs},
		Hostname: s.Hostname,
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: []string{initPathInSandbox},
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  defaultCaps,
				Effective: defaultCaps,
				Permitted: defaultCaps,
			},
			// NoNewPrivileges stays off: sudo is a setuid binary.
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			// No size: tmpfs pages are charged to the sandbox's memory cgroup anyway.
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
			{Destination: initPathInSandbox, Type: "bind", Source: cfg.InitPath, Options: []string{"bind", "ro", "nodev"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: cgroup,
			Namespaces:  ns,
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
				Pids:    &specs.LinuxPids{Limit: ptr(int64(pidsLimit))},
			},
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
			Seccomp:       seccompProfile(),
		},
	}
	if canLowerOOMScore() {
		// The init must survive an OOM kill; it raises its children back to 0.
		spec.Process.OOMScoreAdj = ptr(-1000)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Tools)) {
		spec.Mounts = append(spec.Mounts, specs.Mount{
			Destination: path.Join(ToolsDirInSandbox, name), Type: "bind", Source: cfg.Tools[name], Options: []string{"bind", "ro", "nodev"},
		})
	}
	if s.WorkspaceDir != "" {
		spec.Mounts = append(spec.Mounts, specs.Mount{
			Destination: "/workspace", Type: "bind", Source: s.WorkspaceDir, Options: []string{"rbind", "rw"},
		})
	}
	if s.MemoryMB > 0 {
		limit := int64(s.MemoryMB) << 20
		// Swap equal to the limit means memory+swap == memory: no swap, the OOM killer acts.
		spec.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &limit, Swap: &limit}
	}
	if s.CPUs > 0 {
		quota := int64(s.CPUs * cpuPeriodUS)
		spec.Linux.Resources.CPU = &specs.LinuxCPU{Quota: &quota, Period: ptr(uint64(cpuPeriodUS))}
	}
	return spec
}

// containerConfig turns the spec into libcontainer's config.
func containerConfig(s Spec, rootfs string, rc Config, cgroup string) (*configs.Config, error) {
	cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{
		CgroupName: cgroup,
		Spec:       ociSpec(s, rootfs, rc, cgroup),
	})
	if err != nil {
		return nil, fmt.Errorf("container config: %w", err)
	}
	if s.MemoryMB > 0 && !swapLimitSupported(cfg) {
		cfg.Cgroups.Resources.MemorySwap = 0
	}
	// Raising a hard limit needs CAP_SYS_RESOURCE, which some hosts withhold: stay within ours.
	hard, soft := uint64(nofileHard), uint64(nofileSoft)
	var cur unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &cur); err == nil && cur.Max < hard && !hasSysResource() {
		hard = cur.Max
	}
	cfg.Rlimits = []configs.Rlimit{{Type: unix.RLIMIT_NOFILE, Soft: min(soft, hard), Hard: hard}}
	return cfg, nil
}

// swapLimitSupported reports whether the kernel accounts swap for cgroups (v1 needs
// swapaccount=1; v2 has memory.swap.max where swap is enabled at all).
func swapLimitSupported(cfg *configs.Config) bool {
	if cgroups.IsCgroup2UnifiedMode() {
		return true // libcontainer skips memory.swap.max when it is missing
	}
	mnt, err := cgroups.FindCgroupMountpoint("", "memory")
	if err != nil {
		return false
	}
	return fileExists(mnt + "/memory.memsw.limit_in_bytes")
}

// seccompProfile is a deny-list: everything is allowed except the syscalls below, which fail
// with EPERM (the namespace-creating ones as Docker does it, clone3 with ENOSYS so libc falls
// back to clone, whose flags a filter can inspect). Docker's allow-list is stricter but large;
// the capability bounding set already blocks most of what it adds (mount, module loading, raw
// I/O), and this list closes what capabilities alone leave open to root or to any user.
func seccompProfile() *specs.LinuxSeccomp {
	eperm := uint(unix.EPERM)
	enosys := uint(unix.ENOSYS)
	denied := []string{
		// kernel and module control
		"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
		"create_module", "get_kernel_syms", "query_module", "reboot", "swapon", "swapoff",
		"acct", "syslog", "iopl", "ioperm", "vm86", "vm86old", "uselib", "ustat", "sysfs",
		"_sysctl", "nfsservctl", "lookup_dcookie", "quotactl", "quotactl_fd",
		// the clock
		"settimeofday", "stime", "clock_settime", "clock_settime64", "clock_adjtime", "clock_adjtime64",
		// kernel keyring (not namespaced)
		"add_key", "keyctl", "request_key",
		// large attack surface, not needed by dev tools
		"bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
		// file handles bypass path checks
		"open_by_handle_at",
		// mounts and namespaces (capabilities block most; these also close the userns route)
		"pivot_root", "umount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
		"open_tree", "mount_setattr", "unshare", "setns",
	}
	rules := []specs.LinuxSyscall{
		{Names: denied, Action: specs.ActErrno, ErrnoRet: &eperm},
		{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
	}
	// clone with any namespace flag fails, one rule per flag.
	for _, flag := range []uint64{
		unix.CLONE_NEWNS, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWUSER,
		unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWCGROUP,
	} {
		rules = append(rules, specs.LinuxSyscall{
			Names:    []string{"clone"},
			Action:   specs.ActErrno,
			ErrnoRet: &eperm,
			Args:     []specs.LinuxSeccompArg{{Index: 0, Value: flag, ValueTwo: flag, Op: specs.OpMaskedEqual}},
		})
	}
	return &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: seccompArches(),
		Syscalls:      rules,
	}
}

// seccompArches lists every ABI a process of this machine can call the kernel through, so the
// deny-list cannot be sidestepped with 32-bit syscalls.
func seccompArches() []specs.Arch {
	switch goruntime.GOARCH {
	case "amd64":
		return []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64, specs.ArchARM}
	default:
		return nil
	}
}

// canLowerOOMScore reports whether this process holds CAP_SYS_RESOURCE, without which no
// process can go below its current oom_score_adj or raise a hard rlimit (some VMs and nested
// containers drop it).
func canLowerOOMScore() bool { return hasSysResource() }

func hasSysResource() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }
