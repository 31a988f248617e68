//go:build linux

// Command syscallprobe is the isolation suite's probe (testdata/script/isolation_syscalls.txtar):
// a static program copied into a sandbox that attempts, one by one, the system calls, socket
// families and kernel files a sandbox must not reach, and prints one line per attempt:
// "NAME RESULT", where RESULT is "ok", the errno's name (EPERM, ENOSYS, ...) or, for a file,
// how much of it could be read. The script asserts on the result each must get. It changes
// nothing the sandbox needs: every attempt that could succeed is harmless if it does.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Socket families and protocols x/sys does not name on every architecture.
const (
	afALG        = 38
	afVSOCK      = 40
	netlinkAudit = 9
	auditUser    = 1005      // AUDIT_USER: a record from user space, what CAP_AUDIT_WRITE allows
	noRandomize  = 0x0040000 // ADDR_NO_RANDOMIZE, the personality gdb and setarch -R ask for
)

type probe struct {
	name string
	run  func() error
}

func main() {
	if len(os.Args) > 3 && os.Args[1] == "as" {
		// as UID PROBE: the probe as host user UID (run by root, outside any sandbox).
		uid, err := strconv.Atoi(os.Args[2])
		if err == nil {
			err = errors.Join(unix.Setgroups(nil), unix.Setresgid(uid, uid, uid), unix.Setresuid(uid, uid, uid))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "syscallprobe: as", os.Args[2], err)
			os.Exit(2)
		}
		os.Args = append(os.Args[:1], os.Args[3:]...)
	}
	if len(os.Args) > 1 && os.Args[1] == "inotify-hold" {
		holdInotify()
	}
	if len(os.Args) > 1 {
		if run, ok := poolCommands[os.Args[1]]; ok {
			os.Exit(run(os.Args[2:]))
		}
		// One probe by name, for the attempts whose answer depends on the user.
		for _, p := range probes() {
			if p.name == os.Args[1] {
				report(p)
				return
			}
		}
		fmt.Fprintln(os.Stderr, "syscallprobe: no probe", os.Args[1])
		os.Exit(2)
	}
	for _, p := range probes() {
		report(p)
	}
	for _, f := range files() {
		fmt.Println(f, readResult(f))
	}
	fmt.Println("loop-backing-files", loopBackingFiles())
	for _, c := range []struct {
		name string
		bit  uint
	}{{"CAP_AUDIT_WRITE", unix.CAP_AUDIT_WRITE}, {"CAP_NET_RAW", unix.CAP_NET_RAW}, {"CAP_SYS_CHROOT", unix.CAP_SYS_CHROOT}} {
		fmt.Println("bounding", c.name, hasBoundingCap(c.bit))
	}
}

func report(p probe) { fmt.Println(p.name, errName(p.run())) }

// holdInotify takes inotify instances until the kernel refuses one, prints "inotify-hold N
// ERRNO" and holds them until killed: another user's (or another sandbox's) instances are
// then tried with the "inotify" probe.
func holdInotify() {
	n := 0
	var err error
	for ; n < 1<<16; n++ {
		if _, err = unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
			break
		}
	}
	fmt.Println("inotify-hold", n, errName(err))
	os.Stdout.Close()
	for {
		_ = unix.Pause()
	}
}

func errName(err error) string {
	if err == nil {
		return "ok"
	}
	if errno := unix.Errno(0); errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

// sys makes a raw system call and returns its errno (nil for success).
func sys(nr uintptr, args ...uintptr) error {
	var a [6]uintptr
	copy(a[:], args)
	_, _, errno := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
	if errno != 0 {
		return errno
	}
	return nil
}

// socket creates a socket and closes it at once.
func socket(domain, typ, proto int) error {
	fd, err := unix.Socket(domain, typ, proto)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

func probes() []probe {
	return []probe{
		// Newer than any deny-list: what an allow-list exists for.
		{"listmount", func() error { return sys(unix.SYS_LISTMOUNT, 0, 0, 0, 0) }},
		{"open_tree_attr", func() error { return sys(unix.SYS_OPEN_TREE_ATTR, ^uintptr(0), 0, 0, 0, 0) }},
		// Socket families without a network namespace, or with kernel attack surface only.
		{"socket-vsock", func() error { return socket(afVSOCK, unix.SOCK_STREAM, 0) }},
		{"socket-alg", func() error { return socket(afALG, unix.SOCK_SEQPACKET, 0) }},
		{"socket-inet", func() error { return socket(unix.AF_INET, unix.SOCK_STREAM, 0) }},
		{"socket-unix", func() error { return socket(unix.AF_UNIX, unix.SOCK_STREAM, 0) }},
		{"socket-netlink-route", func() error { return socket(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE) }},
		{"socket-raw-icmp", func() error { return socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP) }},
		{"socket-packet", func() error { return socket(unix.AF_PACKET, unix.SOCK_RAW, 0) }},
		{"icmp-dgram", icmpEcho},
		{"audit-write", auditWrite},
		// personality: only the values moby allows (0, PER_LINUX32, UNAME26, both, the query).
		{"personality-query", func() error { return sys(unix.SYS_PERSONALITY, 0xffffffff) }},
		{"personality-no-randomize", func() error { return sys(unix.SYS_PERSONALITY, noRandomize) }},
		// Namespaces.
		{"unshare-user", func() error { return unix.Unshare(unix.CLONE_NEWUSER) }},
		{"unshare-mount", func() error { return unix.Unshare(unix.CLONE_NEWNS) }},
		{"unshare-net", func() error { return unix.Unshare(unix.CLONE_NEWNET) }},
		{"clone-newuser", func() error { return cloneWith(unix.CLONE_NEWUSER) }},
		{"clone-newpid", func() error { return cloneWith(unix.CLONE_NEWPID) }},
		{"clone-plain", func() error { return cloneWith(0) }},
		{"clone3", func() error { return sys(unix.SYS_CLONE3, 0, 0) }},
		{"setns", func() error { return unix.Setns(-1, 0) }},
		// Kernel interfaces with a history of escapes.
		{"io_uring_setup", func() error { return sys(unix.SYS_IO_URING_SETUP, 1, 0) }},
		{"keyctl", func() error {
			return sys(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, ^uintptr(2) /* KEY_SPEC_SESSION_KEYRING, -3 */, 0)
		}},
		{"add_key", func() error { return sys(unix.SYS_ADD_KEY, 0, 0, 0, 0, 0) }},
		{"bpf", func() error { return sys(unix.SYS_BPF, unix.BPF_PROG_LOAD, 0, 0) }},
		{"perf_event_open", func() error { return sys(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0) }},
		{"userfaultfd", func() error { return sys(unix.SYS_USERFAULTFD, 0) }},
		{"open_by_handle_at", func() error { return sys(unix.SYS_OPEN_BY_HANDLE_AT, ^uintptr(0), 0, 0) }},
		{"mount", func() error { return unix.Mount("none", "/mnt", "tmpfs", 0, "") }},
		{"umount", func() error { return unix.Unmount("/proc", unix.MNT_DETACH) }},
		{"pivot_root", func() error { return unix.PivotRoot("/", "/") }},
		{"fsopen", func() error { return sys(unix.SYS_FSOPEN, 0, 0) }},
		{"reboot", func() error { return unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF) }},
		{"kexec_load", func() error { return sys(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0) }},
		{"init_module", func() error { return sys(unix.SYS_INIT_MODULE, 0, 0, 0) }},
		{"finit_module", func() error { return sys(unix.SYS_FINIT_MODULE, ^uintptr(0), 0, 0) }},
		{"swapon", func() error { return sys(unix.SYS_SWAPON, 0, 0) }},
		{"syslog", func() error { return sys(unix.SYS_SYSLOG, 10, 0, 0) }}, // SYSLOG_ACTION_SIZE_BUFFER
		{"clock_adjtime", func() error {
			var tx unix.Timex // modes 0: a read, which still must not reach the kernel
			return sys(unix.SYS_CLOCK_ADJTIME, unix.CLOCK_REALTIME, uintptr(unsafe.Pointer(&tx)))
		}},
		{"get_mempolicy", func() error { return sys(unix.SYS_GET_MEMPOLICY, 0, 0, 0, 0, 0) }},
		{"kcmp", func() error { return sys(unix.SYS_KCMP, uintptr(os.Getpid()), uintptr(os.Getpid()), 0, 0, 0) }},
		// What a sandbox keeps.
		{"chroot", func() error { return unix.Chroot("/") }},
		{"ptrace-peek-self", func() error { return sys(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, 0, 0, 0) }},
		{"io_setup", ioSetup},
		// A per-user kernel limit: one instance, given back at once (isolation_userns.txtar).
		{"inotify", func() error {
			fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
	}
}

// cloneWith forks with the extra clone flags; a child that comes to life exits at once.
func cloneWith(flags uintptr) error {
	pid, _, errno := unix.RawSyscall6(unix.SYS_CLONE, flags|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 {
		return errno
	}
	if pid == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	_, err := unix.Wait4(int(pid), &ws, 0, nil)
	return err
}

// ioSetup makes and frees a small AIO context (databases and some runtimes use them).
func ioSetup() error {
	var ctx uintptr
	if err := sys(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx))); err != nil {
		return err
	}
	return sys(unix.SYS_IO_DESTROY, ctx)
}

// icmpEcho sends an echo request to 127.0.0.1 through an ICMP datagram socket (what ping uses
// without CAP_NET_RAW) and waits for the reply.
func icmpEcho() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5}); err != nil {
		return err
	}
	echo := []byte{8, 0, 0, 0, 0, 0, 0, 1, 'h', 'i'} // type 8 (echo), the kernel sets id and checksum
	if err := unix.Sendto(fd, echo, 0, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	if n < 1 || buf[0] != 0 {
		return fmt.Errorf("no echo reply")
	}
	return nil
}

// auditWrite sends a user record to the kernel's audit log and returns the kernel's answer.
func auditWrite() error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, netlinkAudit)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5}); err != nil {
		return err
	}
	payload := []byte("hiloop isolation probe\x00")
	msg := make([]byte, unix.NLMSG_HDRLEN+len(payload))
	hdr := (*unix.NlMsghdr)(unsafe.Pointer(&msg[0]))
	*hdr = unix.NlMsghdr{Len: uint32(len(msg)), Type: auditUser, Flags: unix.NLM_F_REQUEST | unix.NLM_F_ACK, Seq: 1}
	copy(msg[unix.NLMSG_HDRLEN:], payload)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	// The ack: a header, then the error code (0 for success) of an NLMSG_ERROR.
	if n < unix.NLMSG_HDRLEN+4 {
		return fmt.Errorf("short netlink answer")
	}
	if reply := (*unix.NlMsghdr)(unsafe.Pointer(&buf[0])); reply.Type != unix.NLMSG_ERROR {
		return fmt.Errorf("netlink answer of type %d", reply.Type)
	}
	if code := *(*int32)(unsafe.Pointer(&buf[unix.NLMSG_HDRLEN])); code != 0 {
		return unix.Errno(-code)
	}
	return nil
}

// files are the kernel files a sandbox must not read: page and slab state, the kernel's
// configuration and build id, where it lies in memory, scheduler and timer internals.
func files() []string {
	return []string{
		"/proc/kpageflags", "/proc/kpagecount", "/proc/kpagecgroup", "/proc/slabinfo",
		"/proc/config.gz", "/proc/timer_list", "/proc/kcore", "/proc/keys", "/proc/vmallocinfo",
		"/proc/pagetypeinfo", "/proc/sysrq-trigger", "/sys/kernel/notes", "/sys/kernel/vmcoreinfo",
		"/sys/kernel/boot_params/data",
	}
}

// readResult reads up to 4 KiB of a file: "empty" when a mask answers (a read of /dev/null),
// "readable" when it yields data, else the error (ENOENT where the kernel has no such file).
func readResult(name string) string {
	f, err := os.Open(name)
	if err != nil {
		return errName(err)
	}
	defer f.Close()
	n, err := f.Read(make([]byte, 4096))
	switch {
	case n > 0:
		return "readable"
	case err != nil && !errors.Is(err, io.EOF):
		return errName(err)
	default:
		return "empty"
	}
}

// loopBackingFiles says how many loop devices' backing files the sandbox can read: they name
// host paths, volume ids of other sandboxes among them.
func loopBackingFiles() string {
	paths, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	more, _ := filepath.Glob("/sys/devices/virtual/block/loop*/loop/backing_file")
	readable := 0
	for _, p := range append(paths, more...) {
		if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			readable++
		}
	}
	if readable == 0 {
		return "none"
	}
	return strconv.Itoa(readable) + "-readable"
}

// hasBoundingCap reports "yes" when the capability is in this process's bounding set.
func hasBoundingCap(bit uint) string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapBnd:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return err.Error()
			}
			if caps&(1<<bit) != 0 {
				return "yes"
			}
			return "no"
		}
	}
	return "unknown"
}
