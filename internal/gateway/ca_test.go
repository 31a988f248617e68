package gateway

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCAPersists(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{CAKeyFile: 0o600, CACertFile: 0o644} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: %v, mode %v, want %v", name, err, fi.Mode().Perm(), want)
		}
	}
	cert := ca.Certificate()
	if cert.Subject.CommonName != "hiloop gateway CA" || !cert.IsCA || cert.NotAfter.Before(time.Now().Add(10*365*24*time.Hour)) {
		t.Fatalf("CA certificate %v, until %v", cert.Subject, cert.NotAfter)
	}
	again, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.CertPEM(), ca.CertPEM()) {
		t.Fatal("a second start made another CA")
	}
	onDisk, _ := os.ReadFile(filepath.Join(dir, CACertFile))
	if !bytes.Equal(onDisk, ca.CertPEM()) {
		t.Fatal("CertPEM is not the file's certificate")
	}
	// A leaf of the reloaded CA verifies against the first one's certificate.
	leaf, err := again.Leaf("api.example.test")
	if err != nil {
		t.Fatal(err)
	}
	verifyLeaf(t, ca, leaf.Leaf, "api.example.test")
}

// Starts racing on an empty directory end up with one CA.
func TestCAConcurrentCreate(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	pems := make([][]byte, 8)
	for i := range pems {
		wg.Go(func() {
			ca, err := LoadOrCreateCA(dir)
			if err != nil {
				t.Error(err)
				return
			}
			pems[i] = ca.CertPEM()
		})
	}
	wg.Wait()
	for _, p := range pems[1:] {
		if !bytes.Equal(p, pems[0]) {
			t.Fatal("two CAs")
		}
	}
}

func TestCABadFiles(t *testing.T) {
	other := t.TempDir()
	if _, err := LoadOrCreateCA(other); err != nil {
		t.Fatal(err)
	}
	otherKey, _ := os.ReadFile(filepath.Join(other, CAKeyFile))
	for _, tc := range []struct {
		name  string
		spoil func(dir string)
		want  []string
	}{
		{"corrupted key", func(dir string) {
			os.WriteFile(filepath.Join(dir, CAKeyFile), []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600)
		}, []string{CAKeyFile, "not a valid private key"}},
		{"not PEM", func(dir string) {
			os.WriteFile(filepath.Join(dir, CAKeyFile), []byte("garbage"), 0o600)
		}, []string{CAKeyFile, "not a PEM private key"}},
		{"another CA's key", func(dir string) {
			os.WriteFile(filepath.Join(dir, CAKeyFile), otherKey, 0o600)
		}, []string{CACertFile, "does not match the key"}},
		{"key gone", func(dir string) {
			os.Remove(filepath.Join(dir, CAKeyFile))
		}, []string{CACertFile, "exists but its key", CAKeyFile}},
		{"corrupted certificate", func(dir string) {
			os.WriteFile(filepath.Join(dir, CACertFile), []byte("junk"), 0o644)
		}, []string{CACertFile, "not a PEM certificate"}},
		{"unreadable key", func(dir string) {
			os.Remove(filepath.Join(dir, CAKeyFile))
			os.Mkdir(filepath.Join(dir, CAKeyFile), 0o700)
		}, []string{CAKeyFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := LoadOrCreateCA(dir); err != nil {
				t.Fatal(err)
			}
			tc.spoil(dir)
			before, _ := os.ReadFile(filepath.Join(dir, CACertFile))
			_, err := LoadOrCreateCA(dir)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
			if after, _ := os.ReadFile(filepath.Join(dir, CACertFile)); !bytes.Equal(before, after) {
				t.Fatal("the certificate was overwritten")
			}
		})
	}
}

// A start that stopped between the key and the certificate completes the CA with its key.
func TestCAKeyWithoutCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, CACertFile))
	again, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Certificate().PublicKey.(*ecdsa.PublicKey).Equal(ca.Certificate().PublicKey) {
		t.Fatal("a new key")
	}
}

func verifyLeaf(t *testing.T, ca *CA, leaf *x509.Certificate, host string) {
	t.Helper()
	roots := x509.NewCertPool()
	block, _ := pem.Decode(ca.CertPEM())
	root, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots.AddCert(root)
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
		t.Fatalf("leaf for %s: %v", host, err)
	}
}

func TestCALeaf(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca.now = func() time.Time { return now }

	a, err := ca.Leaf("API.Example.Test.")
	if err != nil {
		t.Fatal(err)
	}
	verifyLeaf(t, ca, a.Leaf, "api.example.test")
	if len(a.Leaf.DNSNames) != 1 || len(a.Leaf.IPAddresses) != 0 || a.Leaf.IsCA ||
		a.Leaf.NotAfter.Sub(now).Round(time.Minute) != leafValidity || a.Leaf.NotAfter.After(ca.Certificate().NotAfter) {
		t.Fatalf("leaf %v %v until %v", a.Leaf.DNSNames, a.Leaf.IPAddresses, a.Leaf.NotAfter)
	}
	if b, _ := ca.Leaf("api.example.test"); b != a {
		t.Fatal("the cached leaf was not reused")
	}
	ip, err := ca.Leaf("[2001:db8::1]")
	if err != nil {
		t.Fatal(err)
	}
	verifyLeaf(t, ca, ip.Leaf, "2001:db8::1")
	if len(ip.Leaf.IPAddresses) != 1 || len(ip.Leaf.DNSNames) != 0 {
		t.Fatalf("IP leaf %v %v", ip.Leaf.DNSNames, ip.Leaf.IPAddresses)
	}
	if _, err := ca.Leaf("bad host!"); err == nil {
		t.Fatal("a leaf for a bad name")
	}

	// Halfway through its life a leaf is replaced.
	now = now.Add(leafValidity/2 + time.Minute)
	if b, _ := ca.Leaf("api.example.test"); b == a {
		t.Fatal("a leaf past its refresh time was reused")
	}
}

// Concurrent calls for one host mint one leaf; the cache stays bounded.
func TestCALeafConcurrentAndBounded(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	got := make([]any, 16)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			c, err := ca.Leaf("same.example.test")
			if err != nil {
				t.Error(err)
			}
			got[i] = c
		})
	}
	wg.Wait()
	for _, c := range got[1:] {
		if c != got[0] {
			t.Fatal("two leaves for one host")
		}
	}
	for i := range maxCachedLeafs + 10 {
		if _, err := ca.Leaf("h" + strconv.Itoa(i) + ".example.test"); err != nil {
			t.Fatal(err)
		}
	}
	ca.mu.Lock()
	n, l := len(ca.leaves), ca.lru.Len()
	ca.mu.Unlock()
	if n != maxCachedLeafs || l != maxCachedLeafs {
		t.Fatalf("%d cached (%d in the list), want %d", n, l, maxCachedLeafs)
	}
}
