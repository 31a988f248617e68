package daemon

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hiloop/hiloop/internal/atomicfile"
	"github.com/hiloop/hiloop/internal/pki"
)

// TLSDir is the directory under the data dir that holds the daemon's CA (pki.CACertFile,
// pki.CAKeyFile) and the certificate the TLS listener serves (ServerCertFile, ServerKeyFile).
// Moving it away makes new ones at the next start: every client then trusts anew.
const TLSDir = "tls"

// The files of the certificate the daemon makes for its TLS listener, in TLSDir.
const (
	ServerCertFile = "server.crt"
	ServerKeyFile  = "server.key"
)

// serverCertLifetime is how long the certificate the daemon makes is good for. Clients pin its
// fingerprint, so a new one makes every client trust again: it is made to outlast the host.
const serverCertLifetime = 10 * 365 * 24 * time.Hour

// daemonTLS is the daemon's TLS: its own CA, and what the TLS listener serves.
type daemonTLS struct {
	// CA is the daemon's CA, made on first start whether or not --listen is given: it signs
	// the server certificate the daemon makes and users' client certificates, and the TLS
	// listener takes client certificates it signed only.
	CA *pki.CA
	// Cert is the certificate the TLS listener serves, the daemon's own or the operator's
	// (--tls-cert); empty without --listen.
	Cert tls.Certificate
	// Fingerprint is pki.Fingerprint of Cert's leaf, what clients pin; "" without --listen.
	Fingerprint string
	// Fronts are the CAs of --front-ca, whose client certificates identify a cluster's fronts;
	// nil without it.
	Fronts *x509.CertPool
	// frontCerts are the same CAs, which the listener also takes client certificates from.
	frontCerts []*x509.Certificate
}

// loadTLS loads the daemon's CA from <DataDir>/tls, or makes it, and, with a TLS listener to
// serve, its certificate: the operator's (--tls-cert) or the daemon's own, kept in the same
// directory and reused from one start to the next.
func loadTLS(cfg Config, log *slog.Logger) (daemonTLS, error) {
	dir := filepath.Join(cfg.DataDir, TLSDir)
	host := hostName()
	ca, err := pki.LoadOrCreateCA(dir, "sandboxd CA "+host)
	if err != nil {
		return daemonTLS{}, err
	}
	t := daemonTLS{CA: ca}
	if cfg.Listen == "" {
		return t, nil
	}
	if cfg.TLSCertFile != "" {
		t.Cert, err = loadOperatorCert(cfg.TLSCertFile, cfg.TLSKeyFile)
	} else {
		t.Cert, err = ownServerCert(dir, ca, host, hostSANs(host, cfg.TLSSANs), cfg.TLSSANs, log)
	}
	if err != nil {
		return daemonTLS{}, err
	}
	t.Fingerprint = pki.Fingerprint(t.Cert.Certificate[0])
	if cfg.FrontCAFile != "" {
		if t.frontCerts, err = loadFrontCAs(cfg.FrontCAFile); err != nil {
			return daemonTLS{}, err
		}
		t.Fronts = x509.NewCertPool()
		for _, c := range t.frontCerts {
			t.Fronts.AddCert(c)
		}
	}
	return t, nil
}

// loadFrontCAs reads --front-ca: one or more PEM CA certificates.
func loadFrontCAs(file string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--front-ca: %w", err)
	}
	var certs []*x509.Certificate
	for block, rest := pem.Decode(b); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("--front-ca %s: %w", file, err)
		}
		if !c.IsCA {
			return nil, fmt.Errorf("--front-ca %s: %q is not a CA certificate", file, c.Subject.CommonName)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("--front-ca %s: no PEM certificate in it", file)
	}
	return certs, nil
}

// hostName is the host's name, "localhost" in the unlikely case the kernel does not say.
func hostName() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "localhost"
}

// sans are the names and addresses a server certificate is good for.
type sans struct {
	names []string
	ips   []net.IP
}

// hostSANs are the names and addresses of the certificate the daemon makes: the host's name,
// localhost, every address of the host's interfaces, the loopback addresses, and the values
// of --tls-san (checked by addressFlags.apply: a host name or an IP address each).
func hostSANs(host string, extra []string) sans {
	var s sans
	addName := func(n string) {
		n = strings.ToLower(n)
		if !slices.Contains(s.names, n) {
			s.names = append(s.names, n)
		}
	}
	addIP := func(ip net.IP) {
		if !slices.ContainsFunc(s.ips, ip.Equal) {
			s.ips = append(s.ips, ip)
		}
	}
	addName(host)
	addName("localhost")
	addIP(net.IPv4(127, 0, 0, 1))
	addIP(net.IPv6loopback)
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				addIP(n.IP)
			}
		}
	}
	for _, v := range extra {
		if ip, err := netip.ParseAddr(v); err == nil {
			addIP(net.IP(ip.AsSlice()))
		} else {
			addName(v)
		}
	}
	return s
}

// missingSANs are the values of --tls-san that cert does not name.
func missingSANs(cert *x509.Certificate, extra []string) []string {
	var missing []string
	for _, v := range extra {
		if ip, err := netip.ParseAddr(v); err == nil {
			if !slices.ContainsFunc(cert.IPAddresses, net.IP(ip.AsSlice()).Equal) {
				missing = append(missing, v)
			}
		} else if !slices.ContainsFunc(cert.DNSNames, func(n string) bool { return strings.EqualFold(n, v) }) {
			missing = append(missing, v)
		}
	}
	return missing
}

// ownServerCert is the certificate the daemon serves when the operator gives none: the one
// kept in dir, as long as it names every --tls-san value and has not expired (clients pin its
// fingerprint, so it stays the same from one start to the next), else a new one signed by ca
// for want. A pair in dir that does not load is an error, never replaced: the operator says
// whether every client is to trust anew.
func ownServerCert(dir string, ca *pki.CA, host string, want sans, extra []string, log *slog.Logger) (tls.Certificate, error) {
	certPath, keyPath := filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	moveAway := fmt.Sprintf("move %s and %s away to have sandboxd make a new certificate (every client then trusts anew), or restore them", certPath, keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("the TLS listener's certificate: %w: %s", err, moveAway)
		}
		old := pki.Fingerprint(cert.Certificate[0])
		missing := missingSANs(cert.Leaf, extra)
		switch {
		case len(missing) > 0:
			log.Warn("the TLS listener's certificate does not name every --tls-san: making a new one; clients that pinned the old fingerprint must trust the new one",
				"missing", strings.Join(missing, ","), "old_fingerprint", old)
		case time.Now().After(cert.Leaf.NotAfter):
			log.Warn("the TLS listener's certificate has expired: making a new one; clients that pinned the old fingerprint must trust the new one",
				"expired", cert.Leaf.NotAfter.UTC().Format(time.RFC3339), "old_fingerprint", old)
		default:
			return cert, nil
		}
	case errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist):
	case certErr != nil && !errors.Is(certErr, os.ErrNotExist):
		return tls.Certificate{}, fmt.Errorf("the TLS listener's certificate: %w", certErr)
	case keyErr != nil && !errors.Is(keyErr, os.ErrNotExist):
		return tls.Certificate{}, fmt.Errorf("the TLS listener's key: %w", keyErr)
	default:
		return tls.Certificate{}, fmt.Errorf("%s holds half of the TLS listener's certificate (%s or %s is missing): %s", dir, ServerCertFile, ServerKeyFile, moveAway)
	}
	return issueServerCert(certPath, keyPath, ca, host, want)
}

// issueServerCert makes a key and a server certificate for want signed by ca, and keeps both
// (0600), the key first.
func issueServerCert(certPath, keyPath string, ca *pki.CA, host string, want sans) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	der, err := ca.Sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: host},
		DNSNames:    want.names,
		IPAddresses: want.ips,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, key.Public(), serverCertLifetime)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := pki.MarshalKey(key)
	if err != nil {
		return tls.Certificate{}, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := atomicfile.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, err
	}
	if err := atomicfile.WriteFile(certPath, certPEM, 0o600); err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// loadOperatorCert loads the operator's certificate (--tls-cert, PEM, the leaf first, then any
// intermediates) and key (--tls-key), and checks that they make a pair a TLS server can serve
// today.
func loadOperatorCert(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("invalid --tls-cert: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("invalid --tls-key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("invalid --tls-cert %s with --tls-key %s: %w", certFile, keyFile, err)
	}
	leaf, now := cert.Leaf, time.Now()
	switch {
	case now.After(leaf.NotAfter):
		return tls.Certificate{}, fmt.Errorf("invalid --tls-cert %s: it expired on %s", certFile, leaf.NotAfter.UTC().Format(time.DateOnly))
	case now.Before(leaf.NotBefore):
		return tls.Certificate{}, fmt.Errorf("invalid --tls-cert %s: it is valid only from %s", certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	case len(leaf.ExtKeyUsage) > 0 && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny):
		return tls.Certificate{}, fmt.Errorf("invalid --tls-cert %s: it is not for a TLS server (its extended key usage lacks serverAuth)", certFile)
	}
	return cert, nil
}

// checkTLSFlags checks --tls-cert, --tls-key and --tls-san together: an operator's certificate
// is given whole and loads, and the daemon's own certificate is the only one --tls-san names.
func checkTLSFlags(cfg Config) error {
	switch {
	case (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == ""):
		return errors.New("--tls-cert and --tls-key go together: give both, or neither for the certificate sandboxd makes")
	case cfg.FrontCAFile != "" && cfg.Listen == "":
		return errors.New("--front-ca without --listen: fronts reach the daemon on the TLS listener, which --listen turns on")
	case cfg.TLSCertFile == "":
		return nil
	case cfg.Listen == "":
		return errors.New("--tls-cert without --listen: the certificate is for the TLS listener, which --listen turns on")
	case len(cfg.TLSSANs) > 0:
		return errors.New("--tls-san with --tls-cert: --tls-san names what the certificate sandboxd makes is good for; the operator's certificate names its own")
	}
	_, err := loadOperatorCert(cfg.TLSCertFile, cfg.TLSKeyFile)
	return err
}

// serverConfig is the TLS listener's configuration. TLS 1.3 is what Go's clients and most
// others negotiate; 1.2 is the oldest taken. A client may present a certificate, which must
// be one the daemon's CA signed (a user's) or a front CA did (--front-ca): another CA's fails
// the handshake, and a verified one reaches the handlers in the request's TLS state. HTTP/1.1
// only: the API's streams (exec, port forwards, session events) take over their connection,
// which HTTP/2 cannot give.
func (t *daemonTLS) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{t.Cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    t.clientCAs(),
		NextProtos:   []string{"http/1.1"},
	}
}

// clientCAs are the CAs the TLS listener takes client certificates from: its own and the
// fronts'.
func (t *daemonTLS) clientCAs() *x509.CertPool {
	pool := t.CA.Pool()
	for _, c := range t.frontCerts {
		pool.AddCert(c)
	}
	return pool
}

// noHTTP2 is an http.Server's TLSNextProto that turns HTTP/2 off (serverConfig says why).
var noHTTP2 = map[string]func(*http.Server, *tls.Conn, http.Handler){}

// sshEndpoint is where remote clients reach the SSH endpoint listening at addr (from
// --ssh-listen listen): advertise (--ssh-advertise) when given, else the host of listen with
// the port it got, the host's name in place of an address that means every interface.
func sshEndpoint(advertise, listen string, addr *net.TCPAddr, host string) string {
	if advertise != "" {
		return advertise
	}
	h, _, err := net.SplitHostPort(listen)
	if ip, perr := netip.ParseAddr(h); err != nil || perr == nil && ip.IsUnspecified() {
		h = host
	}
	return net.JoinHostPort(h, strconv.Itoa(addr.Port))
}
