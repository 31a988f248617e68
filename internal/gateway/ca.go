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
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hiloop/hiloop/internal/pki"
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

// LoadOrCreateCA loads the CA kept in dir (CAKeyFile and CACertFile), creating it on first use
// as internal/pki makes and checks every CA of the daemon's: an ECDSA P-256 key and a
// self-signed certificate named "hiloop gateway CA", the same one for two daemons starting at
// once, and nothing overwritten.
func LoadOrCreateCA(dir string) (*CA, error) {
	c, err := pki.LoadOrCreate(dir, CAKeyFile, CACertFile, "hiloop gateway CA")
	if err != nil {
		return nil, fmt.Errorf("gateway CA: %w", err)
	}
	return &CA{cert: c.Cert, certPEM: c.PEM, key: c.Key, now: time.Now, leaves: map[string]*list.Element{}}, nil
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
