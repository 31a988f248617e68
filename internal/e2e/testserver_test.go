package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/hiloop/hiloop/internal/fakeprovider"
	"github.com/hiloop/hiloop/internal/gateway"
)

// cmdTestServer starts servers on the host's loopback that a script's sandboxes reach through
// the egress gateway (with sandboxd --gateway-resolve): `testserver NAME HOST...` serves HTTPS
// with a certificate for every HOST, issued by a CA of its own written to $WORK/NAME-ca.pem, and
// plain HTTP, and sets NAME_TLS_PORT and NAME_HTTP_PORT. Both answer every request with one line
// per fact ("server NAME", "host H", "method M", "path P", then each request header, lower case,
// sorted), so scripts can assert on what arrived; GET /bytes/N answers N bytes of data instead.
// With -gateway-ca, the certificate is the one the egress gateway would mint for the first HOST,
// from the gateway CA in $DATADIR (created there if the daemon has not made it yet).
func cmdTestServer(ts *testscript.TestScript, neg bool, args []string) {
	gatewayCA := len(args) > 0 && args[0] == "-gateway-ca"
	if gatewayCA {
		args = args[1:]
	}
	if neg || len(args) < 2 {
		ts.Fatalf("usage: testserver [-gateway-ca] NAME HOST...")
	}
	name, hosts := args[0], args[1:]
	var leaf tls.Certificate
	if gatewayCA {
		ts.Check(os.MkdirAll(ts.Getenv("DATADIR"), 0o700))
		ca, err := gateway.LoadOrCreateCA(ts.Getenv("DATADIR"))
		ts.Check(err)
		l, err := ca.Leaf(hosts[0])
		ts.Check(err)
		leaf = *l
	} else {
		ca, l, err := fakeprovider.Certificates(hosts)
		ts.Check(err)
		ts.Check(os.WriteFile(filepath.Join(ts.Getenv("WORK"), name+"-ca.pem"), ca, 0o644))
		leaf = l
	}

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, ok := strings.CutPrefix(r.URL.Path, "/bytes/"); ok {
			size, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Length", n)
			buf := make([]byte, 64<<10)
			for size > 0 {
				k, err := w.Write(buf[:min(int64(len(buf)), size)])
				if err != nil {
					return
				}
				size -= int64(k)
			}
			return
		}
		lines := []string{"server " + name, "host " + r.Host, "method " + r.Method, "path " + r.URL.RequestURI()}
		var hdrs []string
		for k, vs := range r.Header {
			for _, v := range vs {
				hdrs = append(hdrs, strings.ToLower(k)+": "+v)
			}
		}
		sort.Strings(hdrs)
		fmt.Fprintln(w, strings.Join(append(lines, hdrs...), "\n"))
	})
	tlsSrv := httptest.NewUnstartedServer(handler)
	tlsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}}
	tlsSrv.StartTLS()
	plain := httptest.NewServer(handler)
	ts.Defer(func() {
		tlsSrv.Close()
		plain.Close()
	})
	for env, srv := range map[string]*httptest.Server{"_TLS_PORT": tlsSrv, "_HTTP_PORT": plain} {
		_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		ts.Setenv(name+env, port)
	}
}
