package k8stest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"os"
	"time"

	"github.com/hiloop/hiloop/internal/pki"
)

// certLifetime outlives any test.
const certLifetime = 24 * time.Hour

// keyPair is a PEM certificate and its PEM (PKCS #8) private key.
type keyPair struct {
	certPEM []byte
	keyPEM  []byte
}

// clientCert has ca issue a client certificate: Kubernetes reads the user name from the
// subject's CN and the groups from its O values.
func clientCert(ca *pki.CA, user string, groups []string) (keyPair, error) {
	return issue(ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// servingCert has ca issue a TLS server certificate for hosts (DNS names and IP addresses).
func servingCert(ca *pki.CA, cn string, hosts []string) (keyPair, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return issue(ca, tmpl)
}

func issue(ca *pki.CA, tmpl *x509.Certificate) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, err
	}
	der, err := ca.Sign(tmpl, key.Public(), certLifetime)
	if err != nil {
		return keyPair{}, err
	}
	keyPEM, err := pki.MarshalKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM: keyPEM}, nil
}

// write stores the pair as base+".crt" and base+".key" and returns the two paths.
func (p keyPair) write(base string) (certFile, keyFile string, err error) {
	certFile, keyFile = base+".crt", base+".key"
	if err := os.WriteFile(certFile, p.certPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, p.keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// writeSigningKey writes the key the API server signs service account tokens with (ES256) as
// base+".key" and its public half as base+".pub", and returns the two paths.
func writeSigningKey(base string) (keyFile, pubFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	keyPEM, err := pki.MarshalKey(key)
	if err != nil {
		return "", "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", "", err
	}
	keyFile, pubFile = base+".key", base+".pub"
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return "", "", err
	}
	return keyFile, pubFile, nil
}
