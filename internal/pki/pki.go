// Package pki is the daemon's own certificate authority: the CA it makes on first start, the
// client certificates it signs for users (from a CSR whose key never left the client), the
// keys and requests a client makes, and the fingerprints both ends show and pin.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/hiloop/hiloop/internal/atomicfile"
)

// Fingerprint is a certificate's fingerprint as hiloop shows and pins it: "SHA256:" and the
// unpadded base64 of the SHA-256 of its DER, as OpenSSH prints a key's.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return "SHA256:" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// CA is a certificate authority: the daemon's, kept under its data dir.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// PEM is Cert in PEM.
	PEM []byte
}

// The files of a CA in its directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// caLifetime is how long a CA made here is good for: it signs every client certificate (or
// leaf), and a new one would orphan them all.
const caLifetime = 20 * 365 * 24 * time.Hour

// backdate is how far before now a certificate made here starts: a peer whose clock is a little
// behind still accepts it.
const backdate = time.Hour

// LoadOrCreateCA loads the daemon's CA in dir (CAKeyFile, CACertFile), making it on first start
// (LoadOrCreate).
func LoadOrCreateCA(dir, commonName string) (*CA, error) {
	return LoadOrCreate(dir, CAKeyFile, CACertFile, commonName)
}

// LoadOrCreate loads the CA kept in dir as keyFile (PKCS #8, 0600) and certFile (0644), making
// what is missing on first use: an ECDSA P-256 key and a self-signed certificate named
// commonName. Of two starts racing on one directory, both end up with the same CA. A key that
// cannot be read or parsed, a certificate without its key, a key that does not match the
// certificate or an expired certificate is an error naming the file; nothing is overwritten.
func LoadOrCreate(dir, keyFile, certFile, commonName string) (*CA, error) {
	keyPath, certPath := filepath.Join(dir, keyFile), filepath.Join(dir, certFile)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// The key is written before the certificate: a certificate seen now means the key was there
	// before it, so a missing key then is not a start racing this one.
	_, statErr := os.Stat(certPath)
	certSeen := statErr == nil
	keyPEM, err := os.ReadFile(keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		if certSeen {
			return nil, fmt.Errorf("%s exists but its key %s does not; remove %s to make a new CA (whatever trusts the old one must trust the new one)",
				certPath, keyPath, certPath)
		}
		var key *ecdsa.PrivateKey
		if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			return nil, fmt.Errorf("generating a key: %w", err)
		}
		if keyPEM, err = MarshalKey(key); err != nil {
			return nil, err
		}
		keyPEM, err = writeOnce(keyPath, keyPEM, 0o600)
	}
	if err != nil {
		return nil, err
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		// A first start, or one that stopped between the two files: any certificate for this
		// key will do, and if another start writes one first, its certificate is the one.
		if certPEM, err = newCACert(key, commonName); err != nil {
			return nil, fmt.Errorf("making the certificate: %w", err)
		}
		certPEM, err = writeOnce(certPath, certPEM, 0o644)
	}
	if err != nil {
		return nil, err
	}
	cert, err := parseCACert(certPEM, key, keyFile, certFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certPath, err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}, nil
}

// writeOnce writes data to path unless a file is there already, and returns what path holds.
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

func newCACert(key crypto.Signer, commonName string) ([]byte, error) {
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"hiloop"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caLifetime),
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

// parseCACert reads a CA certificate and checks it against its key (keyFile names it) and the
// clock (both files named in how to start over).
func parseCACert(b []byte, key crypto.Signer, keyFile, certFile string) (*x509.Certificate, error) {
	cert, err := ParseCertificate(b)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("not a CA certificate")
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, fmt.Errorf("does not match the key in %s", keyFile)
	}
	if time.Now().After(cert.NotAfter) {
		return nil, fmt.Errorf("expired on %s; remove %s and %s to make a new CA", cert.NotAfter.Format(time.DateOnly), certFile, keyFile)
	}
	return cert, nil
}

// Pool is a pool holding only the CA, for verifying the certificates it signed.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Sign signs tmpl over pub with the CA, filling the serial number and the validity from now
// for ttl. It returns the certificate's DER.
func (ca *CA) Sign(tmpl *x509.Certificate, pub crypto.PublicKey, ttl time.Duration) ([]byte, error) {
	now := time.Now()
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = now.Add(-backdate)
	tmpl.NotAfter = now.Add(ttl)
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign: %w", err)
	}
	return der, nil
}

// SignClient checks csrPEM (its signature, and a key of a kind and size TLS clients use) and
// signs a client certificate over its key for user, good for ttl. The CSR's subject is
// ignored: the certificate names user.
func (ca *CA) SignClient(csrPEM []byte, user string, ttl time.Duration) (*x509.Certificate, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("the CSR is not a PEM CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the CSR does not parse: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("the CSR's signature is wrong: %w", err)
	}
	if err := checkClientKey(csr.PublicKey); err != nil {
		return nil, err
	}
	der, err := ca.Sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, csr.PublicKey, ttl)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

func checkClientKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return fmt.Errorf("the CSR's ECDSA key is on %s: use P-256 or P-384", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return fmt.Errorf("the CSR's RSA key has %d bits: use 2048 or more", k.N.BitLen())
		}
	default:
		return fmt.Errorf("the CSR's key is a %T: use ECDSA, Ed25519 or RSA", pub)
	}
	return nil
}

// NewKeyAndCSR makes a client's key (ECDSA P-256) and a certificate request over it, both PEM.
func NewKeyAndCSR(commonName string) (keyPEM, csrPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: commonName},
	}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	keyPEM, err = MarshalKey(key)
	if err != nil {
		return nil, nil, err
	}
	return keyPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// MarshalKey is key in PEM (PKCS #8).
func MarshalKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKey reads a PEM private key (PKCS #8, or the EC and RSA forms OpenSSL writes).
func ParseKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("not a PEM private key")
	}
	var key any
	var err error
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("a PEM %q block, not a private key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("not a valid private key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T cannot sign", key)
	}
	return signer, nil
}

// ParseCertificate reads the first PEM certificate of certPEM.
func ParseCertificate(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not a valid certificate: %w", err)
	}
	return cert, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}

// serial is a random 128-bit serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}
