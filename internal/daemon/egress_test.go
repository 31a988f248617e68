package daemon

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hiloop/hiloop/internal/gateway"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/testenv"
)

// --gateway-upstream-ca adds to the host's system roots; it does not replace them.
func TestUpstreamPool(t *testing.T) {
	if p, err := upstreamPool(nil); p != nil || err != nil {
		t.Fatalf("no files: %v, %v; want nil (the host's store alone)", p, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstream test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	dir := t.TempDir()
	file := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
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
	e := egress{ca: ca}
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
	if string(e.CACert()) != string(ca.CertPEM()) {
		t.Errorf("CACert = %q, want the gateway CA", e.CACert())
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
