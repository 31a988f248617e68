// Command gatewaybench is bench/gateway.sh's server and client: the same client runs on the host
// against the server directly and inside a sandbox through the egress gateway, so the two figures
// differ only by the gateway.
//
//	gatewaybench serve DIR NAME          HTTPS for NAME with a throwaway CA; writes DIR/ca.pem and DIR/port
//	gatewaybench latency ADDR NAME CA N  N sequential HTTPS requests, a fresh connection each; one µs figure a line
//	gatewaybench download ADDR NAME CA SIZE RUNS
//	                                     RUNS downloads of SIZE bytes; one MB/s figure a line
//	gatewaybench hold ADDR NAME CA N SECONDS
//	                                     N connections open at once, held, then checked and closed
//
// ADDR is dialled as given (host:port); NAME is the TLS server name and HTTP Host. The client never
// uses proxy variables: inside a sandbox its connections go through the transparent capture.
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hiloop/hiloop/internal/fakeprovider"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gatewaybench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("want serve, latency, download or hold")
	}
	n := func(i int) int {
		v, err := strconv.Atoi(args[i])
		if err != nil {
			fmt.Fprintf(os.Stderr, "gatewaybench: argument %d: %v\n", i, err)
			os.Exit(2)
		}
		return v
	}
	switch {
	case args[0] == "serve" && len(args) == 3:
		return serve(args[1], args[2])
	case args[0] == "latency" && len(args) == 5:
		c, err := newClient(args[1], args[2], args[3])
		if err != nil {
			return err
		}
		return c.latency(n(4))
	case args[0] == "download" && len(args) == 6:
		c, err := newClient(args[1], args[2], args[3])
		if err != nil {
			return err
		}
		return c.download(int64(n(4)), n(5))
	case args[0] == "hold" && len(args) == 6:
		c, err := newClient(args[1], args[2], args[3])
		if err != nil {
			return err
		}
		return c.hold(n(4), time.Duration(n(5))*time.Second)
	}
	return fmt.Errorf("bad arguments: %q", args)
}

// serve answers GET / with a short body and GET /bytes/N with N bytes, over HTTPS on a port of
// 127.0.0.1 the kernel picks, until killed.
func serve(dir, name string) error {
	caPEM, cert, err := fakeprovider.Certificates([]string{name})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	buf := make([]byte, 1<<20)
	mux.HandleFunc("GET /bytes/{n}", func(w http.ResponseWriter, r *http.Request) {
		size, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
		if err != nil || size < 0 {
			http.Error(w, "bad size", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		for size > 0 {
			k := min(size, int64(len(buf)))
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
			size -= k
		}
	})
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}}
	// Written last and renamed into place: the script waits for the port file.
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), caPEM, 0o644); err != nil {
		return err
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	if err := os.WriteFile(filepath.Join(dir, "port.tmp"), []byte(port+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, "port.tmp"), filepath.Join(dir, "port")); err != nil {
		return err
	}
	return srv.ServeTLS(ln, "", "")
}

type client struct {
	addr string // resolved once, so that no figure includes a DNS lookup
	name string
	tls  *tls.Config
}

func newClient(addr, name, caFile string) (*client, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no certificate", caFile)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ips, err := net.LookupHost(host)
	if err != nil {
		return nil, err
	}
	// No session cache: every connection makes a full handshake, on the host as in the sandbox.
	return &client{addr: net.JoinHostPort(ips[0], port), name: name,
		tls: &tls.Config{ServerName: name, RootCAs: pool, NextProtos: []string{"http/1.1"}}}, nil
}

func (c *client) dial() (*tls.Conn, *bufio.Reader, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", c.addr, c.tls)
	if err != nil {
		return nil, nil, err
	}
	return conn, bufio.NewReader(conn), nil
}

// get sends one request on conn and reads the whole response, copying its body into dst.
func (c *client) get(conn *tls.Conn, br *bufio.Reader, path string, closing bool, dst io.Writer) (int64, error) {
	req := "GET " + path + " HTTP/1.1\r\nHost: " + c.name + "\r\n"
	if closing {
		req += "Connection: close\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", path, resp.Status)
	}
	k, err := io.Copy(dst, resp.Body)
	if err == nil && k != resp.ContentLength {
		err = fmt.Errorf("%s: %d of %d bytes", path, k, resp.ContentLength)
	}
	return k, err
}

// latency prints, in µs, the time of each of n requests from dialling to the end of the response;
// the first few warm both sides up and are not printed.
func (c *client) latency(n int) error {
	const warmup = 20
	for i := range warmup + n {
		t0 := time.Now()
		conn, br, err := c.dial()
		if err != nil {
			return err
		}
		_, err = c.get(conn, br, "/", true, io.Discard)
		conn.Close()
		if err != nil {
			return err
		}
		if i >= warmup {
			fmt.Printf("%.1f\n", float64(time.Since(t0).Nanoseconds())/1e3)
		}
	}
	return nil
}

// download prints the MB/s of each of runs downloads of size bytes, each on a new connection,
// timed from dialling to the last byte.
func (c *client) download(size int64, runs int) error {
	path := "/bytes/" + strconv.FormatInt(size, 10)
	for range runs {
		t0 := time.Now()
		conn, br, err := c.dial()
		if err != nil {
			return err
		}
		_, err = c.get(conn, br, path, true, io.Discard)
		conn.Close()
		if err != nil {
			return err
		}
		fmt.Printf("%.0f\n", float64(size)/time.Since(t0).Seconds()/1e6)
	}
	return nil
}

// hold opens n connections at once, makes a request on each, prints "held N", keeps them idle
// for d, then makes a second request on each: a connection the gateway dropped fails it.
func (c *client) hold(n int, d time.Duration) error {
	type held struct {
		conn *tls.Conn
		br   *bufio.Reader
	}
	conns := make([]held, n)
	errs := make([]error, n)
	each := func(f func(i int) error) int {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64) // dialling a thousand at the same instant only measures the SYN backlog
		for i := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				if errs[i] == nil {
					errs[i] = f(i)
				}
			})
		}
		wg.Wait()
		failed := 0
		for _, err := range errs {
			if err != nil {
				failed++
			}
		}
		return failed
	}
	t0 := time.Now()
	failed := each(func(i int) error {
		conn, br, err := c.dial()
		if err != nil {
			return err
		}
		conns[i] = held{conn, br}
		_, err = c.get(conn, br, "/", false, io.Discard)
		return err
	})
	fmt.Printf("held %d failed %d in %.2fs\n", n-failed, failed, time.Since(t0).Seconds())
	time.Sleep(d)
	failed = each(func(i int) error {
		_, err := c.get(conns[i].conn, conns[i].br, "/", false, io.Discard)
		return err
	})
	for _, h := range conns {
		if h.conn != nil {
			h.conn.Close()
		}
	}
	fmt.Printf("alive %d failed %d\n", n-failed, failed)
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("%d of %d connections failed, first: %w", failed, n, err)
		}
	}
	return nil
}
