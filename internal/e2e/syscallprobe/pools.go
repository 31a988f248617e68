//go:build linux

package main

import (
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// poolCommands drain a host-wide kernel pool from inside a sandbox (testdata/script/
// isolation_pools.txtar): each prints one line saying how far it got and why it stopped, and the
// hold- ones then keep what they took until they are killed, so that the script can show that a
// second sandbox still gets its share meanwhile.
var poolCommands = map[string]func(args []string) int{
	"hold-ptys": holdPtys,
	"hold-aio":  holdAIO,
	"aio-setup": aioSetup,
	"hold-tcp":  holdTCP,
	"forkbomb":  forkbomb,
}

// holdPtys opens pseudo-terminals until the sandbox's devpts instance refuses one: "ptys N ERRNO".
func holdPtys([]string) int {
	n := 0
	for {
		fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY, 0)
		if err != nil {
			fmt.Println("ptys", n, errName(err))
			hold()
		}
		_ = fd // held open: each is one pty of the instance
		n++
	}
}

// holdAIO sets up COUNT aio contexts of EVENTS events each: "aio N ok" or "aio N ERRNO" where
// the N+1st failed.
func holdAIO(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: hold-aio COUNT EVENTS")
		return 2
	}
	count, err1 := strconv.Atoi(args[0])
	events, err2 := strconv.Atoi(args[1])
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "hold-aio: COUNT and EVENTS are numbers")
		return 2
	}
	for i := range count {
		var ctx uintptr
		if err := sys(unix.SYS_IO_SETUP, uintptr(events), uintptr(unsafe.Pointer(&ctx))); err != nil {
			fmt.Println("aio", i, errName(err))
			hold()
		}
	}
	fmt.Println("aio", count, "ok")
	hold()
	return 0
}

// aioSetup sets up one aio context of EVENTS events and destroys it: "aio-setup ok" or the errno.
func aioSetup(args []string) int {
	events := 1024
	if len(args) == 1 {
		var err error
		if events, err = strconv.Atoi(args[0]); err != nil {
			fmt.Fprintln(os.Stderr, "aio-setup: EVENTS is a number")
			return 2
		}
	}
	var ctx uintptr
	err := sys(unix.SYS_IO_SETUP, uintptr(events), uintptr(unsafe.Pointer(&ctx)))
	if err == nil {
		err = sys(unix.SYS_IO_DESTROY, ctx)
	}
	fmt.Println("aio-setup", errName(err))
	return 0
}

// holdTCP opens PAIRS TCP connections to itself on the loopback and fills each one's buffers,
// sending until the kernel takes no more without a reader (the receiver's queue and the
// sender's buffer both full, or the sandbox's TCP memory spent): "tcp PAIRS held N MiB" or
// "tcp N ERRNO" where the N+1st connection failed.
func holdTCP(args []string) int {
	pairs, err := strconv.Atoi(append(args, "")[0])
	if len(args) != 1 || err != nil {
		fmt.Fprintln(os.Stderr, "usage: hold-tcp PAIRS")
		return 2
	}
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err == nil {
		err = unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	}
	if err == nil {
		err = unix.Listen(ln, pairs)
	}
	var addr unix.Sockaddr
	if err == nil {
		addr, err = unix.Getsockname(ln)
	}
	if err != nil {
		fmt.Println("tcp listen", errName(err))
		return 1
	}
	chunk := make([]byte, 1<<20)
	held := 0
	for i := range pairs {
		c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
		if err == nil {
			if err = unix.Connect(c, addr); err == unix.EINPROGRESS {
				err = nil // the loopback's handshake is done by the accept
			}
		}
		if err == nil {
			_, _, err = unix.Accept(ln)
		}
		if err != nil {
			fmt.Println("tcp", i, errName(err))
			hold()
		}
		// Send until the kernel takes nothing more, then once more after it had a moment to
		// move what it queued to the receiver.
		for range 2 {
			for {
				n, err := unix.Write(c, chunk)
				if n <= 0 || err != nil {
					break
				}
				held += n
			}
			_ = unix.Nanosleep(&unix.Timespec{Nsec: 10e6}, nil)
		}
	}
	fmt.Println("tcp", pairs, "held", held>>20, "MiB")
	hold()
	return 0
}

// forkbomb forks until the kernel refuses and prints "forkbomb ERRNO"; then, as it exits, every
// child it made starts forking for ever. The children wait for that on a pipe, so that the
// parent's forks do not compete with them for the sandbox's CPU. Plain clone (fork's flags)
// without libc: a child runs on the one thread it was forked on and only ever makes raw system
// calls, so the Go runtime it no longer has is never needed.
func forkbomb([]string) int {
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		fmt.Println("forkbomb pipe", errName(err))
		return 1
	}
	for {
		pid, _, errno := unix.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
		if errno != 0 {
			fmt.Println("forkbomb", unix.ErrnoName(errno))
			return 0 // the pipe's last writer goes: the children start
		}
		if pid == 0 {
			unix.RawSyscall(unix.SYS_CLOSE, uintptr(p[1]), 0, 0)
			unix.RawSyscall(unix.SYS_READ, uintptr(p[0]), uintptr(unsafe.Pointer(&wake[0])), 1)
			bomb()
		}
	}
}

// wake is the children's read buffer: a child must not allocate.
var wake [1]byte

// bomb forks for ever, in every process it makes.
func bomb() {
	for {
		unix.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	}
}

// hold keeps what the process took until it is killed.
func hold() {
	for {
		_ = unix.Pause()
	}
}
