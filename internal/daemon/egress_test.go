package daemon

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hiloop/hiloop/internal/gateway"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/testenv"
)

// --gateway-upstream-ca adds to the host's system roots; it does not replace them.
func TestUpstreamPool(t *testing.T) {
	if p, err := upstreamPool(nil); p != nil || err != nil {
		t.Fatalf("no files: %v, %v; want nil (the host's store alone)", p, err)
	}
	caPEM := testenv.CAPEM(t, "upstream test CA")
	block, _ := pem.Decode(caPEM)
	cert, _ := x509.ParseCertificate(block.Bytes)
	dir := t.TempDir()
	file := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(file, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := upstreamPool([]string{file})
	if err != nil {
		t.Fatal(err)
	}
	want, err := x509.SystemCertPool()
	if err != nil {
		testenv.Unavailable(t, "no system roots here: %v", err)
	}
	want.AddCert(cert)
	if !got.Equal(want) {
		t.Error("the pool is not the system roots plus the file's CA")
	}

	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{bad, filepath.Join(dir, "missing.pem")} {
		if _, err := upstreamPool([]string{file, f}); err == nil {
			t.Errorf("%s: no error", f)
		}
	}
}

// Every sandbox's environment points its clients at the trust store holding the gateway's CA,
// and the runtime is handed that CA.
func TestEgressTrustsTheCA(t *testing.T) {
	ca, err := gateway.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := egress{cas: ca.CertPEM()}
	env := e.Env("sb")
	for _, kv := range []string{
		"NODE_EXTRA_CA_CERTS=" + runtime.ExtraCAPath,
		"SSL_CERT_FILE=" + runtime.CABundlePath,
		"REQUESTS_CA_BUNDLE=" + runtime.CABundlePath,
		"CURL_CA_BUNDLE=" + runtime.CABundlePath,
		"GIT_SSL_CAINFO=" + runtime.CABundlePath,
	} {
		if !slices.Contains(env, kv) {
			t.Errorf("env %q lacks %s", env, kv)
		}
	}
	for _, kv := range gateway.ProxyEnv() {
		if !slices.Contains(env, kv) {
			t.Errorf("env %q lacks %s", env, kv)
		}
	}
	if string(e.CACerts()) != string(ca.CertPEM()) {
		t.Errorf("CACerts = %q, want the gateway CA", e.CACerts())
	}
	if env := (egress{}).Env("sb"); slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "SSL_CERT_FILE=") }) {
		t.Errorf("env %q points at a bundle no CA was added to", env)
	}
}

// --gateway-max-conns: unset, what half of the descriptors carry; set, what they all carry.
func TestGatewayMaxConns(t *testing.T) {
	for _, tc := range []struct {
		flag   int
		nofile uint64
		want   int
		err    string
	}{
		{0, 20000, 1666, ""},
		{0, 1 << 21, gateway.MaxDefaultBudget, ""},
		{100, 20000, 100, ""},
		{3162, 20000, 3162, ""},
		{3163, 20000, 0, "RLIMIT_NOFILE) is 20000, which allows 3162"},
		{-1, 20000, 0, "invalid --gateway-max-conns -1"},
	} {
		got, err := gatewayMaxConns(tc.flag, tc.nofile)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("gatewayMaxConns(%d, %d) = %d, %v; want an error saying %q", tc.flag, tc.nofile, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("gatewayMaxConns(%d, %d) = %d, %v; want %d", tc.flag, tc.nofile, got, err, tc.want)
		}
	}
	if n := fileLimit(); n < 64 {
		t.Fatalf("the descriptor limit read is %d", n)
	}
}

// --sandbox-ca: every file's certificates, in order; a file with anything else stops the start.
func TestSandboxCAs(t *testing.T) {
	dir := t.TempDir()
	a, b := testenv.CAPEM(t, "corp A"), testenv.CAPEM(t, "corp B")
	write := func(name string, content []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	one, two := write("one.pem", a), write("two.pem", append([]byte("# corp's second CA\n"), b...))
	if got, err := sandboxCAs([]string{one, two}); err != nil || string(got) != string(a)+string(b) {
		t.Errorf("sandboxCAs = %q, %v; want both CAs", got, err)
	}
	if got, err := sandboxCAs(nil); got != nil || err != nil {
		t.Errorf("no files: %q, %v", got, err)
	}
	key := write("key.pem", append(a, "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"...))
	for _, f := range []string{write("text.pem", []byte("hello\n")), key, filepath.Join(dir, "missing.pem")} {
		if _, err := sandboxCAs([]string{one, f}); err == nil || !strings.Contains(err.Error(), filepath.Base(f)) {
			t.Errorf("%s: %v, want an error naming the file", f, err)
		}
	}
}

// A host whose bundle holds a CA beyond its distribution's and the image's is told to hand it
// to sandboxes; the CAs sandboxd adds already, and roots the image's distribution dropped, are
// no reason to warn.
func TestUntrustedHostCAs(t *testing.T) {
	root, dropped, proxy, gw := testenv.CAPEM(t, "Mozilla root"), testenv.CAPEM(t, "dropped root"), testenv.CAPEM(t, "inspecting proxy"), testenv.CAPEM(t, "gateway")
	host := slices.Concat(root, dropped, proxy)
	distro := slices.Concat(root, dropped)
	w := untrustedHostCAs("base", host, distro, root, gw)
	for _, want := range []string{"1 CA certificate(s)", "image base", "CN=inspecting proxy", "--sandbox-ca " + hostBundle} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q lacks %q", w, want)
		}
	}
	if strings.Contains(w, "dropped") {
		t.Errorf("warning %q names a root of the host's distribution", w)
	}
	if w := untrustedHostCAs("base", host, distro, root, slices.Concat(gw, host)); w != "" {
		t.Errorf("with the host's bundle added: %q, want no warning", w)
	}
	if w := untrustedHostCAs("base", host, nil, root, gw); !strings.Contains(w, "2 CA certificate(s)") {
		t.Errorf("without a distribution's store: %q, want both beyond the image", w)
	}
}
