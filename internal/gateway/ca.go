package gateway

import (
	"bytes"
	"container/list"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hiloop/hiloop/internal/atomicfile"
)

// The CA's files in the daemon's data directory.
const (
	CAKeyFile  = "gateway-ca.key" // PKCS #8, 0600: whoever reads it can impersonate any host to the sandboxes
	CACertFile = "gateway-ca.pem" // 0644: trusted inside every sandbox
)

// The lifetimes of what the CA signs. A leaf lives a week and is replaced halfway through, so a
// sandbox never meets an expired one and a leaked leaf key is worth little for long.
const (
	caValidity     = 20 * 365 * 24 * time.Hour
	leafValidity   = 7 * 24 * time.Hour
	leafBackdate   = time.Hour // a sandbox clock a little behind still accepts a fresh leaf
	maxCachedLeafs = 1024
)

// CA is the daemon's own certificate authority: it mints the leaf certificates with which the
// gateway terminates TLS for hosts that have a secret bound to them. Sandboxes trust its
// certificate (CertPEM); nothing else should. It is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
	now     func() time.Time // for tests

	mu     sync.Mutex
	leaves map[string]*list.Element // host → *leafEntry, most recently used at the front
	lru    list.List
}

// leafEntry is one host's leaf, or the minting of it under way (ready not yet closed).
type leafEntry struct {
	host      string
	ready     chan struct{}
	cert      *tls.Certificate
	err       error
	refreshAt time.Time
}

// LoadOrCreateCA loads the CA kept in dir (CAKeyFile and CACertFile), creating it on first use:
// an ECDSA P-256 key and a self-signed certificate named "hiloop gateway CA". Of two daemons
// starting at once on one directory, both end up with the same CA. A key that cannot be read or
// parsed, a certificate without its key, or a key that does not match the certificate is an
// error naming the file; nothing is overwritten.
func LoadOrCreateCA(dir string) (*CA, error) {
	keyPath, certPath := filepath.Join(dir, CAKeyFile), filepath.Join(dir, CACertFile)
	// The key is written before the certificate: a certificate seen now means the key was there
	// before it, so a missing key then is not a start racing this one.
	_, statErr := os.Stat(certPath)
	certSeen := statErr == nil
	keyPEM, err := os.ReadFile(keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		if certSeen {
			return nil, fmt.Errorf("gateway CA: %s exists but its key %s does not; remove %s to make a new CA (running sandboxes trust the old one until restarted)",
				certPath, keyPath, certPath)
		}
		if keyPEM, err = newCAKey(); err != nil {
			return nil, fmt.Errorf("gateway CA: generating a key: %w", err)
		}
		keyPEM, err = writeOnce(keyPath, keyPEM, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("gateway CA: %w", err)
	}
	key, err := parseCAKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("gateway CA: %s: %w", keyPath, err)
	}

	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		// A first start, or one that stopped between the two files: any certificate for this
		// key will do, and if another start writes one first, its certificate is the one.
		if certPEM, err = newCACert(key); err != nil {
			return nil, fmt.Errorf("gateway CA: making the certificate: %w", err)
		}
		certPEM, err = writeOnce(certPath, certPEM, 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("gateway CA: %w", err)
	}
	cert, err := parseCACert(certPEM, key)
	if err != nil {
		return nil, fmt.Errorf("gateway CA: %s: %w", certPath, err)
	}
	return caFrom(cert, key), nil
}

// writeOnce creates path with data unless it exists, and returns what path holds: data, or
// what another start wrote first.
func writeOnce(path string, data []byte, perm fs.FileMode) ([]byte, error) {
	err := atomicfile.WriteNewFile(path, data, perm)
	switch {
	case err == nil, errors.Is(err, atomicfile.ErrNotDurable):
		// In place; a crash may undo it, and the next start then makes it again.
		return data, nil
	case errors.Is(err, fs.ErrExist):
		return os.ReadFile(path)
	}
	return nil, err
}

func caFrom(cert *x509.Certificate, key crypto.Signer) *CA {
	return &CA{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		key:     key,
		now:     time.Now,
		leaves:  map[string]*list.Element{},
	}
}

func newCAKey() ([]byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseCAKey(b []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("not a PEM private key")
	}
	var k any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("a PEM %q block, not a private key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("not a valid private key: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T key cannot sign", k)
	}
	return s, nil
}

func newCACert(key crypto.Signer) ([]byte, error) {
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "hiloop gateway CA", Organization: []string{"hiloop"}},
		NotBefore:             now.Add(-leafBackdate),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // it signs leaves only
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func parseCACert(b []byte, key crypto.Signer) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not a valid certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("not a CA certificate")
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("does not match the key in %s", CAKeyFile)
	}
	if time.Now().After(cert.NotAfter) {
		return nil, fmt.Errorf("expired on %s; remove %s and %s to make a new CA", cert.NotAfter.Format(time.DateOnly), CACertFile, CAKeyFile)
	}
	return cert, nil
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// CertPEM returns the CA's certificate in PEM, for the trust stores of sandboxes.
func (ca *CA) CertPEM() []byte { return bytes.Clone(ca.certPEM) }

// Certificate returns the CA's certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Leaf returns a certificate for host (a DNS name, or an IP address literal) signed by the CA.
// Leaves are cached per host and replaced halfway through their week; concurrent calls for one
// host mint it once.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	host = normalHost(host)
	if host == "" {
		return nil, errors.New("gateway CA: no valid host name for a certificate")
	}
	ca.mu.Lock()
	if el, ok := ca.leaves[host]; ok {
		e := el.Value.(*leafEntry)
		select {
		case <-e.ready:
			if e.err == nil && ca.now().Before(e.refreshAt) {
				ca.lru.MoveToFront(el)
				ca.mu.Unlock()
				return e.cert, nil
			}
			// Stale or failed: mint anew below.
			ca.lru.Remove(el)
			delete(ca.leaves, host)
		default:
			ca.mu.Unlock()
			<-e.ready
			if e.err != nil {
				return nil, e.err
			}
			return e.cert, nil
		}
	}
	e := &leafEntry{host: host, ready: make(chan struct{})}
	ca.leaves[host] = ca.lru.PushFront(e)
	for ca.lru.Len() > maxCachedLeafs {
		old := ca.lru.Back()
		ca.lru.Remove(old)
		// A minting under way keeps going for its waiters; it just is not cached.
		delete(ca.leaves, old.Value.(*leafEntry).host)
	}
	ca.mu.Unlock()

	e.cert, e.refreshAt, e.err = ca.mint(host)
	if e.err != nil {
		ca.mu.Lock()
		if el, ok := ca.leaves[host]; ok && el.Value == e {
			ca.lru.Remove(el)
			delete(ca.leaves, host)
		}
		ca.mu.Unlock()
	}
	close(e.ready)
	if e.err != nil {
		return nil, e.err
	}
	return e.cert, nil
}

// mint signs a fresh leaf for host with a key of its own.
func (ca *CA) mint(host string) (*tls.Certificate, time.Time, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("gateway CA: leaf key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("gateway CA: serial: %w", err)
	}
	now := ca.now()
	notAfter := now.Add(leafValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-leafBackdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{a.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("gateway CA: signing a leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, time.Time{}, err
	}
	refreshAt := now.Add(notAfter.Sub(now) / 2)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, refreshAt, nil
}
