package runtime

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
)

// ParseCAs returns the PEM of every certificate in b, re-encoded one after another, or an error
// naming what is not a certificate: a file given as CAs to trust must hold nothing else.
func ParseCAs(b []byte) ([]byte, error) {
	var out bytes.Buffer
	for n := 1; ; n++ {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			if len(bytes.TrimSpace(b)) > 0 && n == 1 {
				return nil, fmt.Errorf("no PEM certificate in it")
			}
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("block %d is a %q, not a CERTIFICATE", n, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n, err)
		}
		_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes})
	}
	if out.Len() == 0 {
		return nil, fmt.Errorf("no PEM certificate in it")
	}
	return out.Bytes(), nil
}

// certKey identifies a certificate by its DER.
type certKey [sha256.Size]byte

// certKeys returns the keys of every certificate in the PEM bundle b; what is not a
// certificate is skipped, as the TLS libraries that read a bundle skip it.
func certKeys(b []byte) map[certKey]bool {
	keys := map[certKey]bool{}
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return keys
		}
		if block.Type == "CERTIFICATE" {
			keys[sha256.Sum256(block.Bytes)] = true
		}
	}
}

// notIn returns the certificates of the PEM bundle b that have holds none of, PEM-encoded in
// b's order, each once.
func notIn(b []byte, have map[certKey]bool) []byte {
	var out bytes.Buffer
	seen := map[certKey]bool{}
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return out.Bytes()
		}
		k := sha256.Sum256(block.Bytes)
		if block.Type != "CERTIFICATE" || have[k] || seen[k] {
			continue
		}
		seen[k] = true
		_ = pem.Encode(&out, block)
	}
}

// MissingCAs returns the certificates of the PEM bundle host (a host's system bundle) that none
// of the PEM bundles trusted holds (an image's bundle, the CAs sandboxd adds to it): what a
// sandbox would not trust that the host does.
func MissingCAs(host []byte, trusted ...[]byte) []*x509.Certificate {
	have := map[certKey]bool{}
	for _, t := range trusted {
		for k := range certKeys(t) {
			have[k] = true
		}
	}
	var out []*x509.Certificate
	rest := notIn(host, have)
	for {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return out
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
}
