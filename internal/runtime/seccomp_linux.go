//go:build linux

package runtime

import (
	goruntime "runtime"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The sandbox's seccomp policy is an allow-list with the semantics of moby's default profile for
// a container holding defaultCaps: the calls below are allowed, a few with their arguments
// filtered, everything else fails with EPERM. libcontainer makes calls newer than the newest one
// named here fail with ENOSYS instead, so that libc and runtimes fall back to the older call they
// replace (faccessat2, fchmodat2, clone3). Where this list is stricter than moby's, the line
// says so.

// allowedSyscalls are allowed to every process of a sandbox, grouped by purpose. A name the
// kernel's architecture does not have (arch_prctl on arm64) is skipped.
var allowedSyscalls = [][]string{
	// Files, directories and descriptors. Stricter than moby: listmount and statmount, new
	// and used by nothing a sandbox runs, are not here.
	{
		"access", "chdir", "chmod", "chown", "chown32", "close", "close_range", "copy_file_range",
		"creat", "dup", "dup2", "dup3", "faccessat", "faccessat2", "fadvise64", "fadvise64_64",
		"fallocate", "fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown", "fchown32", "fchownat",
		"fcntl", "fcntl64", "fdatasync", "flock", "fstat", "fstat64", "fstatat64", "fstatfs",
		"fstatfs64", "fsync", "ftruncate", "ftruncate64", "futimesat", "getcwd", "getdents",
		"getdents64", "ioctl", "lchown", "lchown32", "link", "linkat", "_llseek", "lseek", "lstat",
		"lstat64", "mkdir", "mkdirat", "mknod", "mknodat", "name_to_handle_at", "newfstatat", "open",
		"openat", "openat2", "pipe", "pipe2", "pread64", "preadv", "preadv2", "pwrite64", "pwritev",
		"pwritev2", "read", "readahead", "readlink", "readlinkat", "readv", "rename", "renameat",
		"renameat2", "rmdir", "sendfile", "sendfile64", "splice", "stat", "stat64", "statfs",
		"statfs64", "statx", "symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "tee",
		"truncate", "truncate64", "umask", "unlink", "unlinkat", "utime", "utimensat",
		"utimensat_time64", "utimes", "vmsplice", "write", "writev", "cachestat",
	},
	// Extended attributes.
	{
		"fgetxattr", "flistxattr", "fremovexattr", "fsetxattr", "getxattr", "getxattrat", "lgetxattr",
		"listxattr", "listxattrat", "llistxattr", "lremovexattr", "lsetxattr", "removexattr",
		"removexattrat", "setxattr", "setxattrat",
	},
	// Waiting for events: poll, epoll, inotify, fanotify marks (fanotify_init needs
	// CAP_SYS_ADMIN), eventfd, signalfd, timerfd.
	{
		"epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait", "epoll_pwait2",
		"epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "fanotify_mark", "inotify_add_watch",
		"inotify_init", "inotify_init1", "inotify_rm_watch", "_newselect", "poll", "ppoll",
		"ppoll_time64", "pselect6", "pselect6_time64", "select", "signalfd", "signalfd4",
		"timerfd_create", "timerfd_gettime", "timerfd_gettime64", "timerfd_settime",
		"timerfd_settime64",
	},
	// Asynchronous I/O through libaio (databases use it). io_uring is not here: it is a
	// second system call interface that this filter could not see into.
	{
		"io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_pgetevents_time64", "io_setup",
		"io_submit",
	},
	// Memory.
	{
		"brk", "madvise", "map_shadow_stack", "membarrier", "memfd_create", "memfd_secret", "mincore",
		"mlock", "mlock2", "mlockall", "mmap", "mmap2", "mprotect", "mremap", "mseal", "msync",
		"munlock", "munlockall", "munmap", "pkey_alloc", "pkey_free", "pkey_mprotect",
		"remap_file_pages",
	},
	// Processes and threads (clone is filtered below).
	{
		"capget", "capset", "execve", "execveat", "exit", "exit_group", "fork", "futex",
		"futex_requeue", "futex_time64", "futex_wait", "futex_waitv", "futex_wake", "getcpu",
		"get_robust_list", "get_thread_area", "getpgid", "getpgrp", "getpid", "getppid", "getrandom",
		"getrusage", "getsid", "gettid", "kill", "landlock_add_rule", "landlock_create_ruleset",
		"landlock_restrict_self", "pidfd_open", "pidfd_send_signal", "prctl", "process_mrelease",
		"restart_syscall", "rseq", "seccomp", "set_robust_list", "set_thread_area", "set_tid_address",
		"setpgid", "setsid", "sysinfo", "tgkill", "times", "tkill", "uname", "uretprobe", "vfork",
		"wait4", "waitid", "waitpid",
	},
	// Debuggers and profilers on the sandbox's own processes (the PID namespace bounds them).
	{"ptrace", "process_vm_readv", "process_vm_writev"},
	// User and group ids.
	{
		"getegid", "getegid32", "geteuid", "geteuid32", "getgid", "getgid32", "getgroups",
		"getgroups32", "getresgid", "getresgid32", "getresuid", "getresuid32", "getuid", "getuid32",
		"setfsgid", "setfsgid32", "setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups",
		"setgroups32", "setregid", "setregid32", "setresgid", "setresgid32", "setresuid",
		"setresuid32", "setreuid", "setreuid32", "setuid", "setuid32",
	},
	// Limits, priorities and scheduling (the cgroup bounds what they can take).
	{
		"getpriority", "getrlimit", "ioprio_get", "ioprio_set", "prlimit64", "sched_get_priority_max",
		"sched_get_priority_min", "sched_getaffinity", "sched_getattr", "sched_getparam",
		"sched_getscheduler", "sched_rr_get_interval", "sched_rr_get_interval_time64",
		"sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield",
		"setpriority", "setrlimit", "ugetrlimit",
	},
	// Signals.
	{
		"alarm", "pause", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo",
		"rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_sigtimedwait_time64",
		"rt_tgsigqueueinfo", "sigaltstack", "sigprocmask", "sigreturn",
	},
	// Clocks and timers. Setting the clock needs CAP_SYS_TIME; adjtimex without it only reads.
	// Stricter than moby: clock_adjtime, which also reaches PTP hardware clocks, is denied.
	{
		"adjtimex", "clock_getres", "clock_getres_time64", "clock_gettime", "clock_gettime64",
		"clock_nanosleep", "clock_nanosleep_time64", "getitimer", "gettimeofday", "nanosleep",
		"setitimer", "time", "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
		"timer_gettime64", "timer_settime", "timer_settime64",
	},
	// Sockets once made (socket itself is filtered below). Unlike moby, no socketcall: see
	// seccompArches.
	{
		"accept", "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt", "listen",
		"recv", "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "send", "sendmmsg", "sendmsg",
		"sendto", "setsockopt", "shutdown", "socketpair",
	},
	// System V and POSIX IPC (the IPC namespace is the sandbox's own).
	{
		"ipc", "mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedreceive_time64",
		"mq_timedsend", "mq_timedsend_time64", "mq_unlink", "msgctl", "msgget", "msgrcv", "msgsnd",
		"semctl", "semget", "semop", "semtimedop", "semtimedop_time64", "shmat", "shmctl", "shmdt",
		"shmget",
	},
	// One architecture's own calls.
	{
		"arch_prctl", "modify_ldt", // x86
		"arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint", "cacheflush", "set_tls", // arm
	},
}

// capabilitySyscalls are allowed only while the sandbox holds the capability that makes them
// useful, as moby does: without it they would fail with EPERM in the kernel anyway, and the
// filter keeps their code out of reach. defaultCaps decides which apply.
var capabilitySyscalls = []struct {
	capability string
	names      []string
}{
	{"CAP_SYS_CHROOT", []string{"chroot"}},
	{"CAP_SYS_PTRACE", []string{"kcmp", "pidfd_getfd", "process_madvise"}},
	{"CAP_SYS_NICE", []string{"get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node"}},
	{"CAP_SYS_TTY_CONFIG", []string{"vhangup"}},
	{"CAP_SYS_TIME", []string{"settimeofday", "stime", "clock_settime", "clock_settime64"}},
	{"CAP_SYS_PACCT", []string{"acct"}},
}

// neverSyscalls stay out of the sandbox whatever capabilities it is given, unlike in moby,
// where CAP_SYS_ADMIN and others bring them in: they create namespaces or mounts, load code
// into the kernel, reach it through interfaces with a long record of escapes, or touch state
// the sandbox does not own (the clock, the keyring, the kernel log). A test holds the
// allow-list to it.
var neverSyscalls = []string{
	"unshare", "setns", "mount", "umount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount",
	"fspick", "move_mount", "open_tree", "open_tree_attr", "mount_setattr", "listmount", "statmount",
	"open_by_handle_at", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
	"io_uring_register", "add_key", "keyctl", "request_key", "init_module", "finit_module",
	"delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "syslog",
	"clock_adjtime", "clock_adjtime64", "iopl", "ioperm", "quotactl", "quotactl_fd",
	"lookup_dcookie", "fanotify_init", "sethostname", "setdomainname", "vm86", "vm86old", "uselib",
	"ustat", "sysfs", "_sysctl", "nfsservctl",
}

// Socket families the filter refuses: AF_ALG (the kernel's crypto API as a socket: attack
// surface, no use in a sandbox) and AF_VSOCK (no network namespace: a bound port collides with
// the host's and other sandboxes', and it addresses the hypervisor). moby refuses both too.
const (
	afALG   = 38
	afVSOCK = 40
)

// netlinkAudit is the audit netlink protocol. Without CAP_AUDIT_WRITE a record sent on it
// fails with EPERM, which sudo and PAM print as a warning on every call; EPROTONOSUPPORT on the
// socket instead is what they take for "this kernel has no audit" and go on quietly.
const netlinkAudit = unix.NETLINK_AUDIT

// namespaceCloneFlags are the clone flags that make a new namespace; clone with any of them
// fails with EPERM, as in moby for a container without CAP_SYS_ADMIN.
const namespaceCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// allowedPersonalities are the personality(2) values moby allows: Linux, 32-bit Linux
// (setarch/linux32), the 2.6-style uname (UNAME26) of either, and the query. Disabling address
// randomisation (setarch -R, gdb) is refused.
var allowedPersonalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// seccompProfile returns the filter every process of a sandbox runs under (see the comment at
// the top of this file).
func seccompProfile() *specs.LinuxSeccomp {
	enosys := uint(unix.ENOSYS)
	eperm := uint(unix.EPERM)
	allow := func(names ...string) specs.LinuxSyscall {
		return specs.LinuxSyscall{Names: names, Action: specs.ActAllow}
	}
	var rules []specs.LinuxSyscall
	for _, group := range allowedSyscalls {
		rules = append(rules, allow(group...))
	}
	for _, g := range capabilitySyscalls {
		if slices.Contains(defaultCaps, g.capability) {
			rules = append(rules, allow(g.names...))
		}
	}
	// socket: every family but the two above; audit sockets as if the kernel had no audit
	// (see netlinkAudit). Rules are alternatives, their comparisons conjunctions.
	arg := func(i uint, op specs.LinuxSeccompOperator, v uint64) specs.LinuxSeccompArg {
		return specs.LinuxSeccompArg{Index: i, Value: v, Op: op}
	}
	for _, args := range [][]specs.LinuxSeccompArg{
		{arg(0, specs.OpLessThan, unix.AF_NETLINK)},
		{arg(0, specs.OpLessThan, afALG), arg(2, specs.OpNotEqual, netlinkAudit)},
		{arg(0, specs.OpEqualTo, afALG+1)},
		{arg(0, specs.OpGreaterThan, afVSOCK)},
	} {
		rules = append(rules, specs.LinuxSyscall{Names: []string{"socket"}, Action: specs.ActAllow, Args: args})
	}
	eprotonosupport := uint(unix.EPROTONOSUPPORT)
	rules = append(rules, specs.LinuxSyscall{Names: []string{"socket"}, Action: specs.ActErrno, ErrnoRet: &eprotonosupport,
		Args: []specs.LinuxSeccompArg{arg(0, specs.OpEqualTo, unix.AF_NETLINK), arg(2, specs.OpEqualTo, netlinkAudit)}})
	for _, p := range allowedPersonalities {
		rules = append(rules, specs.LinuxSyscall{Names: []string{"personality"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: p, Op: specs.OpEqualTo}}})
	}
	// clone without namespace flags (threads, fork); its flags are the first argument on
	// every architecture this runs on.
	rules = append(rules, specs.LinuxSyscall{Names: []string{"clone"}, Action: specs.ActAllow,
		Args: []specs.LinuxSeccompArg{{Index: 0, Value: namespaceCloneFlags, ValueTwo: 0, Op: specs.OpMaskedEqual}}})
	// clone3 passes its flags in memory, where a filter cannot look: ENOSYS makes libc and Go
	// fall back to clone.
	rules = append(rules, specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys})
	return &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &eperm,
		Architectures:   seccompArches(),
		Syscalls:        rules,
	}
}

// seccompArches lists the ABIs a sandbox's processes may call the kernel through; a call
// through any other kills the thread with SIGSYS. 32-bit x86 (i386 programs, and int 0x80 from
// 64-bit ones) is left out: it creates sockets through the socketcall multiplexer, whose
// arguments sit in memory where no filter can check the family (moby's profile lets AF_VSOCK
// through that way). x32 is left out too: Debian's kernels and ours are built without it, and
// its rules made libseccomp's compile, paid at every start, 3 times slower (2.4 → 7.2 ms
// here). 32-bit ARM has a plain socket call and stays.
func seccompArches() []specs.Arch {
	switch goruntime.GOARCH {
	case "amd64":
		return []specs.Arch{specs.ArchX86_64}
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64, specs.ArchARM}
	default:
		return nil
	}
}
