package fakeprovider

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// listeners are the loopback servers Start runs.
type listeners struct {
	plain, secure *http.Server
	url, tlsURL   string
	caPEM         []byte
}

// Start serves s on the loopback on two fresh ports: plain HTTP (URL) and HTTPS (TLSURL) with a
// certificate for 127.0.0.1, localhost and every one of hosts, issued by a CA of its own
// (CACertPEM). It is called at most once; Close stops both.
func (s *Server) Start(hosts ...string) error {
	if s.plain != nil {
		return errors.New("fake provider: already started")
	}
	caPEM, leaf, err := Certificates(append([]string{"127.0.0.1", "localhost"}, hosts...))
	if err != nil {
		return err
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pl.Close()
		return err
	}
	s.plain = &http.Server{Handler: s, ReadHeaderTimeout: time.Minute}
	s.secure = &http.Server{Handler: s, ReadHeaderTimeout: time.Minute,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{leaf}}}
	s.url, s.tlsURL, s.caPEM = "http://"+pl.Addr().String(), "https://"+tl.Addr().String(), caPEM
	go s.plain.Serve(pl)
	go s.secure.ServeTLS(tl, "", "")
	return nil
}

// URL is the plain HTTP server's base URL, http://127.0.0.1:PORT, once started.
func (s *Server) URL() string { return s.url }

// TLSURL is the HTTPS server's base URL, https://127.0.0.1:PORT, once started.
func (s *Server) TLSURL() string { return s.tlsURL }

// CACertPEM is the certificate of the CA that signed the HTTPS server's certificate.
func (s *Server) CACertPEM() []byte { return s.caPEM }

// Close stops the servers Start started, cutting open connections (streams in flight too).
func (s *Server) Close() error {
	if s.plain == nil {
		return nil
	}
	return errors.Join(s.plain.Close(), s.secure.Close())
}

// Certificates makes a CA, returned as PEM, and a server certificate it signed for hosts (DNS
// names or IP addresses), valid for a day: enough for a test or a benchmark, nothing else.
func Certificates(hosts []string) ([]byte, tls.Certificate, error) {
	if len(hosts) == 0 {
		return nil, tls.Certificate{}, errors.New("certificates: no host")
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "hiloop e2e test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if a, err := netip.ParseAddr(h); err == nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	leaf := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), leaf, nil
}
