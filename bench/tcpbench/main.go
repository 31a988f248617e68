// Command tcpbench is bench/ssh.sh's source and sink of bulk TCP data: fast enough (1 MiB writes
// and reads of zeros, no per-byte work) that a transfer through a forward measures the forward,
// not the programs at its ends. The same binary runs on the host and inside a sandbox.
//
//	tcpbench serve ADDR SIZE        send SIZE bytes to every connection to ADDR, then close it
//	tcpbench fetch ADDR SIZE RUNS   RUNS transfers one after another, each read to its end and
//	                                checked to be SIZE bytes; one MB/s figure a line
//	tcpbench relay ADDR UPSTREAM    join every connection to ADDR to a new one to UPSTREAM, as a
//	                                forward that relays does at its best: Go's TCP-to-TCP splice
//	tcpbench serve-tls ADDR SIZE    serve, over TLS (Go's crypto/tls, a throwaway certificate)
//	tcpbench fetch-tls ADDR SIZE RUNS
//	                                fetch, over TLS: with serve-tls, the most TLS carries on the
//	                                machine, one connection's encryption and decryption
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// chunk is what one write or read moves.
const chunk = 1 << 20

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "tcpbench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 3 {
		return errors.New("usage: tcpbench serve|serve-tls ADDR SIZE | fetch|fetch-tls ADDR SIZE RUNS | relay ADDR UPSTREAM")
	}
	if args[0] == "relay" {
		return relay(args[1], args[2])
	}
	size, err := strconv.ParseInt(args[2], 10, 64)
	if err != nil {
		return fmt.Errorf("SIZE: %w", err)
	}
	var serverTLS, clientTLS *tls.Config
	if strings.HasSuffix(args[0], "-tls") {
		if serverTLS, err = throwawayTLS(); err != nil {
			return err
		}
		clientTLS = &tls.Config{InsecureSkipVerify: true} // a benchmark's own server on loopback
	}
	switch {
	case args[0] == "serve" || args[0] == "serve-tls":
		return serve(args[1], size, serverTLS)
	case (args[0] == "fetch" || args[0] == "fetch-tls") && len(args) == 4:
		runs, err := strconv.Atoi(args[3])
		if err != nil {
			return fmt.Errorf("RUNS: %w", err)
		}
		for range runs {
			mbs, err := fetch(args[1], size, clientTLS)
			if err != nil {
				return err
			}
			fmt.Printf("%.0f\n", mbs)
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// throwawayTLS is a server configuration with a certificate made for this run.
func throwawayTLS() (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, nil
}

func serve(addr string, size int64, conf *tls.Config) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if conf != nil {
		l = tls.NewListener(l, conf)
	}
	buf := make([]byte, chunk)
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		// One at a time: the benchmark's transfers run one after another.
		for left := size; left > 0; {
			n, err := c.Write(buf[:min(left, chunk)])
			if err != nil {
				break
			}
			left -= int64(n)
		}
		c.Close()
	}
}

// relay joins each connection to addr to one to upstream until both directions end.
func relay(addr, upstream string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				return
			}
			defer u.Close()
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(u, c) // spliced: both are TCP connections
				_ = u.(*net.TCPConn).CloseWrite()
				close(done)
			}()
			_, _ = io.Copy(c, u)
			_ = c.(*net.TCPConn).CloseWrite()
			<-done
		}()
	}
}

// fetch reads one transfer to its end and returns its rate in MB/s.
func fetch(addr string, size int64, conf *tls.Config) (float64, error) {
	start := time.Now()
	var c net.Conn
	var err error
	if conf != nil {
		c, err = tls.Dial("tcp", addr, conf)
	} else {
		c, err = net.Dial("tcp", addr)
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	buf := make([]byte, chunk)
	var got int64
	for {
		n, err := c.Read(buf)
		got += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if got != size {
		return 0, fmt.Errorf("short transfer from %s: %d bytes of %d", addr, got, size)
	}
	return float64(size) / time.Since(start).Seconds() / 1e6, nil
}
