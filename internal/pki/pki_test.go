package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCAIsMadeOnceAndReloaded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	ca, err := LoadOrCreateCA(dir, "sandboxd CA")
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadOrCreateCA(dir, "sandboxd CA")
	if err != nil {
		t.Fatal(err)
	}
	if Fingerprint(ca.Cert.Raw) != Fingerprint(again.Cert.Raw) {
		t.Fatal("a second start made a new CA")
	}
	if fi, err := os.Stat(filepath.Join(dir, CAKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	// A start cut short between the key and the certificate: a certificate over the same key.
	if err := os.Remove(filepath.Join(dir, CACertFile)); err != nil {
		t.Fatal(err)
	}
	remade, err := LoadOrCreateCA(dir, "sandboxd CA")
	if err != nil || !remade.Cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(ca.Cert.PublicKey) {
		t.Fatalf("the certificate remade: %v, or over another key", err)
	}
	// A certificate whose key is gone is refused, never replaced: what trusts it would break.
	if err := os.Remove(filepath.Join(dir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateCA(dir, "sandboxd CA"); err == nil || !strings.Contains(err.Error(), "exists but its key") {
		t.Fatalf("a certificate without its key: %v, want a refusal", err)
	}
}

func TestSignClientNamesTheUserAndVerifies(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir(), "sandboxd CA")
	if err != nil {
		t.Fatal(err)
	}
	_, csr, err := NewKeyAndCSR("whatever the client says")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.SignClient(csr, "alice", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "alice" {
		t.Fatalf("CN %q, want the token's user", cert.Subject.CommonName)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the client certificate does not verify against its CA: %v", err)
	}
	other, err := LoadOrCreateCA(t.TempDir(), "another daemon")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: other.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Fatal("another CA verified the certificate")
	}
}

func TestSignClientRefusesBadRequests(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir(), "sandboxd CA")
	if err != nil {
		t.Fatal(err)
	}
	_, good, err := NewKeyAndCSR("x")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(good)
	tampered := append([]byte(nil), block.Bytes...)
	tampered[len(tampered)-3] ^= 0xff // the signature's end
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	weakDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, weak)
	if err != nil {
		t.Fatal(err)
	}
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	p224DER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, p224)
	if err != nil {
		t.Fatal(err)
	}
	for name, csr := range map[string][]byte{
		"not PEM":       []byte("hello"),
		"a certificate": ca.PEM,
		"bad signature": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: tampered}),
		"RSA 1024":      pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: weakDER}),
		"P-224":         pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: p224DER}),
	} {
		if _, err := ca.SignClient(csr, "alice", time.Hour); err == nil {
			t.Errorf("%s: signed", name)
		}
	}
}

func TestFingerprintIsOpenSSHShaped(t *testing.T) {
	fp := Fingerprint([]byte("x"))
	if !strings.HasPrefix(fp, "SHA256:") || len(fp) != len("SHA256:")+43 {
		t.Fatalf("fingerprint %q: want SHA256: and 43 base64 characters", fp)
	}
}
