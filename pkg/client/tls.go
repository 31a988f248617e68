package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/hiloop/hiloop/internal/pki"
)

// TLSOptions say how a client trusts an https:// daemon and proves who it is.
type TLSOptions struct {
	// Fingerprint pins the server's certificate: "SHA256:" and the unpadded base64 of the
	// SHA-256 of its DER (pki.Fingerprint), as `hiloop remote add` stored it. The certificate
	// is then trusted for that alone, with no CA or name check, as incus and OpenSSH trust a
	// pinned key; any other is a *FingerprintMismatchError. Empty: the system's roots verify
	// the certificate and its name, as for any HTTPS server.
	Fingerprint string
	// CertFile and KeyFile are the client certificate and its key, PEM, presented at every
	// handshake: both or neither.
	CertFile, KeyFile string
	// SessionCache keeps TLS sessions for resumption; nil: a cache for this client only.
	SessionCache tls.ClientSessionCache
}

// FingerprintMismatchError says the server presented a certificate other than the pinned one:
// its key was replaced, or something else answers at the address. hiloop never re-pins by
// itself.
type FingerprintMismatchError struct {
	// Host is the server's address, host:port.
	Host string
	// Remote names the configured remote, when the client was made for one.
	Remote string
	Pinned string
	Got    string
}

func (e *FingerprintMismatchError) Error() string {
	if e.Remote != "" {
		return fmt.Sprintf("the server at %s presents %s, but remote %s is pinned to %s: if the server's certificate was replaced on purpose, `hiloop remote remove %s` and add it again with a new trust token",
			e.Host, e.Got, e.Remote, e.Pinned, e.Remote)
	}
	return fmt.Sprintf("the server at %s presents %s, but the client is pinned to %s: if the server's certificate was replaced on purpose, check the new fingerprint on the server (`hiloop system info` there) before pinning it",
		e.Host, e.Got, e.Pinned)
}

// config is the tls.Config for the server host at addr (host:port); remote names it for
// messages.
func (o TLSOptions) config(host, addr, remote string) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         host,
		ClientSessionCache: o.SessionCache,
	}
	if cfg.ClientSessionCache == nil {
		// An exec or a port stream dials a connection of its own: it resumes the session of
		// the process's first one instead of paying for a full handshake again. Sessions are
		// not kept across CLI runs: a resumed TLS 1.3 handshake still does the key exchange,
		// and saved ~0.4 ms of the ~1.5 ms a full one adds to a remote exec of ~19 ms p50 (a
		// local one ~13 ms), for a file that would hold secrets as good as the key's.
		cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	}
	if o.Fingerprint != "" {
		pinned := o.Fingerprint
		// The pin is the trust: the chain and the name are not checked, the fingerprint
		// is. VerifyConnection runs on resumed sessions too, with the certificate the
		// session was made with.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("the server at %s presented no certificate", addr)
			}
			if got := pki.Fingerprint(cs.PeerCertificates[0].Raw); got != pinned {
				return &FingerprintMismatchError{Host: addr, Remote: remote, Pinned: pinned, Got: got}
			}
			return nil
		}
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("a client certificate needs both its certificate and its key file")
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load the client certificate: %w", err)
		}
		// Presented whatever CAs the server names as acceptable: the server decides.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &cert, nil
		}
	}
	return cfg, nil
}

// ProbeFingerprint connects to the https:// server at rawURL and returns the fingerprint of
// the certificate it presents (pki.Fingerprint), trusting nothing: for showing it to a person
// who compares it with the one the server's operator gave, before pinning it.
func ProbeFingerprint(ctx context.Context, rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return "", fmt.Errorf("invalid address %q: use https://host:port", rawURL)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "443")
	}
	var got string
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         u.Hostname(),
		InsecureSkipVerify: true, // only read, never trusted: the caller shows it
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("the server at %s presented no certificate", addr)
			}
			got = pki.Fingerprint(cs.PeerCertificates[0].Raw)
			return nil
		},
	}
	conn, err := dialTLS(ctx, &net.Dialer{Timeout: 5 * time.Second}, addr, cfg)
	if err != nil {
		var opErr *net.OpError
		if errors.As(err, &opErr) && opErr.Op == "dial" {
			return "", &UnreachableError{Host: rawURL, Err: opErr.Err}
		}
		return "", fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	conn.Close()
	return got, nil
}
