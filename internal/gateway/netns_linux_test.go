//go:build linux

package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"github.com/google/nftables"
	"github.com/hiloop/hiloop/internal/testenv"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// newNetNS returns a fresh network namespace with only lo, as a sandbox has. It lives as long
// as the handle and the sockets made in it; the test leaves nothing behind.
func newNetNS(t *testing.T) *os.File {
	t.Helper()
	testenv.RequireRoot(t)
	type result struct {
		f   *os.File
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread, and its namespace, end with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- result{err: os.NewSyscallError("unshare", err)}
			return
		}
		f, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		done <- result{f, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.f.Close() })
	return r.f
}

// dial connects from inside ns, as a process of the sandbox would.
func dialIn(t *testing.T, ns *os.File, network, addr string) (net.Conn, error) {
	t.Helper()
	return await(t, "dial "+addr, func() (net.Conn, error) {
		return inNamespace(ns, func() (net.Conn, error) { return net.Dial(network, addr) })
	})
}

func listen(t *testing.T, ns *os.File, network, addr string) net.Listener {
	t.Helper()
	l, err := Listen(ns, network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func listenPacket(t *testing.T, ns *os.File, network, addr string) net.PacketConn {
	t.Helper()
	c, err := ListenPacket(ns, network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A sandbox's connections to anywhere but its loopback reach the gateway's listeners, which
// learn where each was going; everything else is refused, and loopback is left alone.
func TestSetupCaptures(t *testing.T) {
	ns := newNetNS(t)
	if err := Setup(ns); err != nil {
		t.Fatal(err)
	}
	proxy4 := listen(t, ns, "tcp", "127.0.0.1:"+strconv.Itoa(ProxyPort))
	proxy6 := listen(t, ns, "tcp", "[::1]:"+strconv.Itoa(ProxyPort))
	dnsTCP := listen(t, ns, "tcp", "127.0.0.1:"+strconv.Itoa(DNSPort))
	dnsUDP4 := listenPacket(t, ns, "udp", "127.0.0.1:"+strconv.Itoa(DNSPort))
	dnsUDP6 := listenPacket(t, ns, "udp", "[::1]:"+strconv.Itoa(DNSPort))

	t.Run("tcp", func(t *testing.T) {
		for _, tc := range []struct {
			dst string
			at  net.Listener
		}{
			{"1.2.3.4:80", proxy4},
			{"10.0.0.1:443", proxy4},
			{"169.254.169.254:80", proxy4},
			{"[2001:db8::1]:443", proxy6},
			{"[::ffff:1.2.3.4]:8080", proxy4}, // a v4-mapped dial leaves as IPv4
			{"1.2.3.4:53", dnsTCP},
			// The explicit proxy: not redirected, so the original destination is the
			// listener's own address.
			{"127.0.0.1:" + strconv.Itoa(ProxyPort), proxy4},
			{"[::1]:" + strconv.Itoa(ProxyPort), proxy6},
		} {
			t.Run(tc.dst, func(t *testing.T) {
				c, err := dialIn(t, ns, "tcp", tc.dst)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				s := accept(t, tc.at)
				want := netip.MustParseAddrPort(tc.dst)
				want = netip.AddrPortFrom(want.Addr().Unmap(), want.Port())
				got, err := OriginalDst(s)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("OriginalDst = %v, want %v", got, want)
				}
				// The client believes it is connected to what it dialled.
				if got := addrPort(c.RemoteAddr()); got != want {
					t.Errorf("client's remote address = %v, want %v", got, want)
				}
				// The accepted connection carries bytes, used from this goroutine.
				if _, err := c.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				b := make([]byte, 1)
				if _, err := s.Read(b); err != nil || b[0] != 'x' {
					t.Fatalf("read %q, %v", b, err)
				}
			})
		}
	})

	t.Run("dns over udp", func(t *testing.T) {
		for _, tc := range []struct {
			dst string
			at  net.PacketConn
		}{
			{"8.8.8.8:53", dnsUDP4},
			{"[2001:db8::53]:53", dnsUDP6},
		} {
			t.Run(tc.dst, func(t *testing.T) {
				c, err := dialIn(t, ns, "udp", tc.dst)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := c.Write([]byte("q")); err != nil {
					t.Fatal(err)
				}
				type packet struct {
					b    []byte
					from net.Addr
				}
				p, err := await(t, "DNS query", func() (packet, error) {
					b := make([]byte, 16)
					n, from, err := tc.at.ReadFrom(b)
					return packet{b[:n], from}, err
				})
				if err != nil || string(p.b) != "q" {
					t.Fatalf("resolver read %q, %v", p.b, err)
				}
				// The answer goes back through the same translation: the client's socket,
				// connected to tc.dst, accepts only what comes from there.
				if _, err := tc.at.WriteTo([]byte("a"), p.from); err != nil {
					t.Fatal(err)
				}
				b, err := await(t, "DNS answer", func() ([]byte, error) {
					b := make([]byte, 16)
					n, err := c.Read(b)
					return b[:n], err
				})
				if err != nil || string(b) != "a" {
					t.Fatalf("client read %q, %v", b, err)
				}
			})
		}
	})

	// UDP other than DNS is refused at once, so QUIC falls back to TCP rather than waiting.
	t.Run("other udp", func(t *testing.T) {
		for _, dst := range []string{"8.8.8.8:443", "[2001:db8::1]:443", "10.0.0.1:123"} {
			t.Run(dst, func(t *testing.T) {
				c, err := dialIn(t, ns, "udp", dst)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_, err = c.Write([]byte("quic"))
				if err == nil {
					_, err = await(t, "refusal of "+dst, func() (int, error) { return c.Read(make([]byte, 16)) })
				}
				if err == nil {
					t.Fatalf("UDP to %s got an answer", dst)
				}
				t.Logf("UDP to %s: %v", dst, err)
				if !refused(err) {
					t.Errorf("UDP to %s: %v, want a refusal", dst, err)
				}
			})
		}
	})

	t.Run("icmp", func(t *testing.T) {
		c, err := inNamespace(ns, func() (net.PacketConn, error) { return net.ListenPacket("ip4:icmp", "0.0.0.0") })
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		echo := []byte{8, 0, 0xf7, 0xff, 0, 0, 0, 0} // type 8, code 0, checksum, id 0, seq 0
		_, err = c.WriteTo(echo, &net.IPAddr{IP: net.ParseIP("1.2.3.4")})
		t.Logf("ICMP echo to 1.2.3.4: %v", err)
		if !refused(err) {
			t.Errorf("ICMP echo to 1.2.3.4: %v, want a refusal", err)
		}
	})

	t.Run("loopback untouched", func(t *testing.T) {
		own := listen(t, ns, "tcp", "127.0.0.1:0")
		c, err := dialIn(t, ns, "tcp", own.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s := accept(t, own)
		got, err := OriginalDst(s)
		if err != nil {
			t.Fatal(err)
		}
		if want := addrPort(own.Addr()); got != want {
			t.Errorf("OriginalDst = %v, want %v", got, want)
		}

		closed := listen(t, ns, "tcp", "127.0.0.1:0")
		addr := closed.Addr().String()
		closed.Close()
		if c, err := dialIn(t, ns, "tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
			if c != nil {
				c.Close()
			}
			t.Errorf("dial %s: %v, want connection refused", addr, err)
		}
	})
}

// refused reports whether err is the kernel refusing a packet the rules reject.
func refused(err error) bool {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.EACCES, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// A daemon restart sets up a namespace that already has the rules: they are replaced, not
// added to, and still capture.
func TestSetupIdempotent(t *testing.T) {
	ns := newNetNS(t)
	for range 3 {
		if err := Setup(ns); err != nil {
			t.Fatal(err)
		}
	}
	type counts struct{ tables, defaults4, defaults6 int }
	got, err := inNamespace(ns, func() (counts, error) {
		var n counts
		c, err := nftables.New()
		if err != nil {
			return n, err
		}
		tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
		if err != nil {
			return n, err
		}
		var table *nftables.Table
		for _, tb := range tables {
			if tb.Name == tableName {
				n.tables++
				table = tb
			}
		}
		if table == nil {
			return n, fmt.Errorf("no table inet %s", tableName)
		}
		for _, want := range captureChains(table) {
			rules, err := c.GetRules(table, want.chain)
			if err != nil {
				return n, fmt.Errorf("rules of %s: %w", want.chain.Name, err)
			}
			if len(rules) != len(want.rules) {
				return n, fmt.Errorf("chain %s has %d rules, want %d", want.chain.Name, len(rules), len(want.rules))
			}
		}
		for fam, count := range map[int]*int{netlink.FAMILY_V4: &n.defaults4, netlink.FAMILY_V6: &n.defaults6} {
			routes, err := netlink.RouteList(nil, fam)
			if err != nil {
				return n, err
			}
			for _, r := range routes {
				if r.Dst == nil || r.Dst.IP.IsUnspecified() {
					if ones, _ := maskOf(r.Dst); ones == 0 {
						*count++
					}
				}
			}
		}
		return n, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := (counts{1, 1, 1}); got != want {
		t.Errorf("after three Setups: %+v, want %+v", got, want)
	}

	proxy := listen(t, ns, "tcp", "127.0.0.1:"+strconv.Itoa(ProxyPort))
	c, err := dialIn(t, ns, "tcp", "1.2.3.4:80")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := OriginalDst(accept(t, proxy)); err != nil || got != netip.MustParseAddrPort("1.2.3.4:80") {
		t.Errorf("OriginalDst = %v, %v, want 1.2.3.4:80", got, err)
	}
}

func maskOf(n *net.IPNet) (int, int) {
	if n == nil {
		return 0, 0
	}
	return n.Mask.Size()
}

// Setup touches only the sandbox's namespace, and what it made there goes with the namespace.
func TestSetupLeavesNothingOnHost(t *testing.T) {
	testenv.RequireRoot(t)
	sleep := testenv.RequireTool(t, "sleep")
	before := hostFootprint(t)

	cmd := exec.Command(sleep, "3600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if err := Setup(ns); err != nil {
		t.Fatal(err)
	}
	if after := hostFootprint(t); after != before {
		t.Errorf("host after Setup: %+v, before: %+v", after, before)
	}

	cmd.Process.Kill()
	cmd.Wait()
	ns.Close()
	if after := hostFootprint(t); after != before {
		t.Errorf("host after the sandbox ended: %+v, before: %+v", after, before)
	}
	if holders := nsHolders(st.Ino); len(holders) > 0 {
		t.Errorf("the sandbox's namespace is still held by %v", holders)
	}
}

// footprint is what Setup would leave on the host if it programmed the wrong namespace.
type footprint struct {
	table                bool
	loRoutes4, loRoutes6 int
}

func hostFootprint(t *testing.T) footprint {
	t.Helper()
	var s footprint
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		s.table = s.table || tb.Name == tableName
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	for fam, n := range map[int]*int{netlink.FAMILY_V4: &s.loRoutes4, netlink.FAMILY_V6: &s.loRoutes6} {
		routes, err := netlink.RouteList(lo, fam)
		if err != nil {
			t.Fatal(err)
		}
		*n = len(routes)
	}
	return s
}

// nsHolders lists the tasks whose network namespace is the one with inode ino.
func nsHolders(ino uint64) []string {
	want := "net:[" + strconv.FormatUint(ino, 10) + "]"
	links, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*/ns/net")
	var holders []string
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && target == want {
			holders = append(holders, l)
		}
	}
	return holders
}
