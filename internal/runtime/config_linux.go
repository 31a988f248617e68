//go:build linux

package runtime

import (
	"fmt"
	"hash/fnv"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/hiloop/hiloop/internal/runtime/initproc"
)

// initPathInSandbox is where the host's hiloop-init is bind-mounted read-only.
const initPathInSandbox = "/.hiloop/init"

// ToolsDirInSandbox is where Config.Tools are bind-mounted read-only, one file each.
const ToolsDirInSandbox = "/.hiloop/bin"

// defaultCaps is Docker's default capability set without CAP_NET_RAW and CAP_AUDIT_WRITE:
// enough for sudo, apt and chown, not enough to mount, load modules, trace across the host or
// change the clock. Raw sockets are not needed for ping (ICMP datagram sockets, see
// pingGroupRange), and CAP_AUDIT_WRITE let a sandbox write records into the host's audit log.
// capabilitySyscalls (seccomp_linux.go) follows this list.
var defaultCaps = []string{
	"CAP_CHOWN",
	"CAP_DAC_OVERRIDE",
	"CAP_FSETID",
	"CAP_FOWNER",
	"CAP_MKNOD",
	"CAP_SETGID",
	"CAP_SETUID",
	"CAP_SETFCAP",
	"CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT",
	"CAP_KILL",
}

// pingGroupRange lets every group of the sandbox open ICMP datagram sockets (ping without
// CAP_NET_RAW), in the sandbox's own network namespace, as Docker does. The kernel reads the
// range in the sandbox's user namespace, so it must not reach past the ids mapped there.
var pingGroupRange = "0 " + strconv.Itoa(IDRangeSize-1)

// Masked paths (a file reads as empty, a directory as an empty read-only tmpfs) and read-only
// paths: Docker's and runc's, plus the kernel state a sandbox has no business reading.
var (
	maskedPaths = []string{
		// Docker's and runc's defaults.
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
		// Physical page, slab and vmalloc state: the raw material of memory-layout attacks.
		"/proc/kpageflags",
		"/proc/kpagecount",
		"/proc/kpagecgroup",
		"/proc/slabinfo",
		"/proc/vmallocinfo",
		"/proc/pagetypeinfo",
		// The kernel's build configuration tells an attacker which bugs it has; its build id
		// (notes) names the exact build.
		"/proc/config.gz",
		"/sys/kernel/notes",
		// Where the kernel and its page tables lie in physical and virtual memory (the KASLR
		// offset among them), and the boot loader's memory map.
		"/sys/kernel/vmcoreinfo",
		"/sys/kernel/boot_params",
		// Loop, device-mapper and other virtual block devices: a loop device's backing_file names
		// host paths, other sandboxes' volume ids among them. A sandbox has no block devices.
		"/sys/devices/virtual/block",
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
	pidsLimit   = PidsPerSandbox
	nofileSoft  = initproc.NofileSoft
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

// ociSpec describes the sandbox as an OCI runtime spec; rootfs is the mounted overlay, userns
// the path of the sandbox's user namespace (see newUserNS), which maps s.IDBase.
func ociSpec(s Spec, rootfs, userns string, cfg Config, cgroup string) *specs.Spec {
	ns := []specs.LinuxNamespace{
		{Type: specs.UserNamespace, Path: userns},
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
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5", "max=" + strconv.Itoa(PtysPerSandbox)}},
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
			Sysctl:        map[string]string{"net.ipv4.ping_group_range": pingGroupRange},
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
	if s.Spare {
		// The slot Adopt mounts the workspace on: a shared mount on the host, so the mount
		// reaches this one, its slave (see makeWorkspaceSlot).
		spec.Mounts = append(spec.Mounts, specs.Mount{
			Destination: "/workspace", Type: "bind", Source: filepath.Join(filepath.Dir(rootfs), workspaceSlot), Options: []string{"bind", "rw", "slave"},
		})
	}
	if s.WorkspaceDir != "" {
		// idmap with the sandbox's own mapping: ids on disk are ids inside (see userns_linux.go).
		spec.Mounts = append(spec.Mounts, specs.Mount{
			Destination: "/workspace", Type: "bind", Source: s.WorkspaceDir, Options: []string{"rbind", "rw", "idmap"},
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

// specconvMu serialises specconv.CreateLibcontainerConfig: it puts the package's shared
// default devices (specconv.AllowedDevices, pointers) into every config and then writes the
// container's root uid and gid into them, so two sandboxes' configs made at once race, and
// each config's devices would hold the owner the last one wrote.
var specconvMu sync.Mutex

// containerConfig turns the spec into libcontainer's config.
func containerConfig(s Spec, rootfs, userns string, rc Config, cgroup string) (*configs.Config, error) {
	specconvMu.Lock()
	cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{
		CgroupName: cgroup,
		Spec:       ociSpec(s, rootfs, userns, rc, cgroup),
	})
	if err == nil {
		// The devices become this config's own, as they were written for it.
		for i, d := range cfg.Devices {
			own := *d
			cfg.Devices[i] = &own
		}
	}
	specconvMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("container config: %w", err)
	}
	if s.MemoryMB > 0 && !swapLimitSupported(cfg) {
		cfg.Cgroups.Resources.MemorySwap = 0
	}
	// libcontainer sets the limits of the sandbox's init from here, once it is in the sandbox's
	// user namespace, which is not ours: that takes CAP_SYS_RESOURCE, which some hosts withhold.
	// Without it the init keeps our hard limit and raises its soft one itself (initproc).
	if hasSysResource() {
		cfg.Rlimits = []configs.Rlimit{{Type: unix.RLIMIT_NOFILE, Soft: nofileSoft, Hard: nofileHard}}
	}
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
