package front

import (
	"context"
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
	"math/big"
	"net"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hiloop/hiloop/internal/pki"
)

// The objects that hold the front's TLS identity, in the front's own namespace.
const (
	// SecretName is the Secret holding the front's two CAs and the serving certificate every
	// replica presents (SecretCert, SecretKey).
	SecretName = "hiloop-front"
	// CAConfigMapName is the ConfigMap publishing the CA certificate (CAConfigMapKey), for the
	// node agents' --front-ca.
	CAConfigMapName = "hiloop-front-ca"
	CAConfigMapKey  = "ca.crt"
	// ServiceName is the front's Service: its names are always in the serving certificate.
	ServiceName = "hiloop-front"
)

// The keys of SecretName. Two CAs, so that no certificate a user holds can pass for a front's
// at a node agent: the fronts' CA (SecretCACert, SecretCAKey; published for the agents' --front-ca)
// signs only the replicas' client certificates, the users' CA (SecretUsersCACert,
// SecretUsersCAKey) the users' client certificates and the serving certificate.
const (
	SecretCACert      = "ca.crt"
	SecretCAKey       = "ca.key"
	SecretUsersCACert = "users-ca.crt"
	SecretUsersCAKey  = "users-ca.key"
	SecretCert        = "tls.crt"
	SecretKey         = "tls.key"
)

const (
	// servingLifetime is how long the serving certificate is good for: clients pin its
	// fingerprint, so it is made to outlast the cluster.
	servingLifetime = 10 * 365 * 24 * time.Hour
	// clientLifetime is how long a replica's client certificate (to the agents) is good for;
	// a replica makes a new one at every start.
	clientLifetime = 365 * 24 * time.Hour
	// clientCommonName names the front's client certificates.
	clientCommonName = "hiloop-front"
)

// Identity is the front's TLS identity: the same CA and serving certificate in every replica,
// and this replica's own client certificate for the agents, signed by that CA.
type Identity struct {
	// CA signs the fronts' client certificates only; the node agents trust it for fronts
	// (--front-ca).
	CA *pki.CA
	// UsersCA signs the users' client certificates (the trust exchange) and Serving.
	UsersCA *pki.CA
	// Serving is the certificate the front's TLS listener presents.
	Serving tls.Certificate
	// Fingerprint is pki.Fingerprint of Serving's leaf: what clients pin.
	Fingerprint string
	// Client is this replica's client certificate to the node agents.
	Client tls.Certificate
}

// LoadIdentity reads the front's identity from the Secret SecretName in namespace, making it
// when there is none (the first replica: a new CA and a serving certificate for sans and the
// Service's names); of replicas racing, the one whose create lands wins and the others read
// its Secret. It publishes the CA certificate in the ConfigMap CAConfigMapName, and signs this
// replica a client certificate. A serving certificate that lacks one of sans is kept (every
// client pinned it) and said in the log.
func LoadIdentity(ctx context.Context, c client.Client, namespace string, sans []string, log *slog.Logger) (Identity, error) {
	want := append(serviceNames(namespace), sans...)
	var sec corev1.Secret
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: SecretName}, &sec)
	if apierrors.IsNotFound(err) {
		var made *corev1.Secret
		if made, err = newIdentitySecret(namespace, want); err != nil {
			return Identity{}, err
		}
		err = c.Create(ctx, made)
		switch {
		case err == nil:
			sec = *made
			log.Info("made the front's CA and serving certificate", "secret", namespace+"/"+SecretName)
		case apierrors.IsAlreadyExists(err):
			// Another replica won: its Secret is the identity.
			err = c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: SecretName}, &sec)
		}
	}
	if err != nil {
		return Identity{}, fmt.Errorf("the front's TLS identity (Secret %s/%s): %w", namespace, SecretName, err)
	}
	id, err := parseIdentity(&sec)
	if err != nil {
		return Identity{}, fmt.Errorf("the front's TLS identity (Secret %s/%s): %w: delete the Secret to have a new one made (every client and agent then trusts anew)", namespace, SecretName, err)
	}
	if missing := missingNames(id.Serving.Leaf, sans); len(missing) > 0 {
		log.Warn("the front's serving certificate does not name every --tls-san: it is kept, since clients pinned it; delete the Secret to have one made with them",
			"missing", strings.Join(missing, ","), "secret", namespace+"/"+SecretName)
	}
	if err := publishCA(ctx, c, namespace, id.CA.PEM); err != nil {
		return Identity{}, err
	}
	if id.Client, err = clientCertificate(id.CA); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// serviceNames are the DNS names of the front's Service in namespace.
func serviceNames(namespace string) []string {
	return []string{ServiceName, ServiceName + "." + namespace, ServiceName + "." + namespace + ".svc", ServiceName + "." + namespace + ".svc.cluster.local"}
}

// newIdentitySecret makes a CA and a serving certificate for names (host names or IP
// addresses), as the Secret that keeps them.
func newIdentitySecret(namespace string, names []string) (*corev1.Secret, error) {
	ca, caKeyPEM, err := newCA("hiloop fronts CA " + namespace)
	if err != nil {
		return nil, err
	}
	usersCA, usersKeyPEM, err := newCA("hiloop front " + namespace)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		Subject:     pkix.Name{CommonName: ServiceName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else if !slices.Contains(leaf.DNSNames, strings.ToLower(n)) {
			leaf.DNSNames = append(leaf.DNSNames, strings.ToLower(n))
		}
	}
	der, err := usersCA.Sign(leaf, key.Public(), servingLifetime)
	if err != nil {
		return nil, err
	}
	keyPEM, err := pki.MarshalKey(key)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: namespace},
		Type:       corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			SecretCACert: ca.PEM, SecretCAKey: caKeyPEM,
			SecretUsersCACert: usersCA.PEM, SecretUsersCAKey: usersKeyPEM,
			SecretCert: pemCert(der), SecretKey: keyPEM,
		},
	}, nil
}

// newCA makes a CA named commonName, and its key in PEM.
func newCA(commonName string) (*pki.CA, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"hiloop"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(20 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := pki.MarshalKey(key)
	if err != nil {
		return nil, nil, err
	}
	return &pki.CA{Cert: cert, Key: key, PEM: pemCert(der)}, keyPEM, nil
}

// parseIdentity reads the CA and serving certificate of sec.
func parseIdentity(sec *corev1.Secret) (Identity, error) {
	for _, k := range []string{SecretCACert, SecretCAKey, SecretUsersCACert, SecretUsersCAKey, SecretCert, SecretKey} {
		if len(sec.Data[k]) == 0 {
			return Identity{}, fmt.Errorf("it has no %s", k)
		}
	}
	ca, err := parseCA(sec.Data[SecretCACert], sec.Data[SecretCAKey], SecretCACert)
	if err != nil {
		return Identity{}, err
	}
	usersCA, err := parseCA(sec.Data[SecretUsersCACert], sec.Data[SecretUsersCAKey], SecretUsersCACert)
	if err != nil {
		return Identity{}, err
	}
	if ca.Cert.Equal(usersCA.Cert) {
		return Identity{}, fmt.Errorf("%s and %s are one CA: a user's certificate would pass for a front's", SecretCACert, SecretUsersCACert)
	}
	serving, err := tls.X509KeyPair(sec.Data[SecretCert], sec.Data[SecretKey])
	if err != nil {
		return Identity{}, fmt.Errorf("%s and %s: %w", SecretCert, SecretKey, err)
	}
	if _, err := serving.Leaf.Verify(x509.VerifyOptions{Roots: usersCA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return Identity{}, fmt.Errorf("%s is not signed by %s: %w", SecretCert, SecretUsersCACert, err)
	}
	return Identity{CA: ca, UsersCA: usersCA, Serving: serving, Fingerprint: pki.Fingerprint(serving.Certificate[0])}, nil
}

// parseCA reads a CA's certificate and key from the Secret (name names the certificate).
func parseCA(certPEM, keyPEM []byte, name string) (*pki.CA, error) {
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	key, err := pki.ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the key of %s: %w", name, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%s is not a CA certificate", name)
	}
	return &pki.CA{Cert: cert, Key: key, PEM: pemCert(cert.Raw)}, nil
}

// publishCA writes caPEM to the ConfigMap CAConfigMapName, creating it or bringing it in line.
func publishCA(ctx context.Context, c client.Client, namespace string, caPEM []byte) error {
	var cm corev1.ConfigMap
	key := client.ObjectKey{Namespace: namespace, Name: CAConfigMapName}
	err := c.Get(ctx, key, &cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: CAConfigMapName, Namespace: namespace}, Data: map[string]string{CAConfigMapKey: string(caPEM)}}
		err = c.Create(ctx, &cm)
		if apierrors.IsAlreadyExists(err) {
			return publishCA(ctx, c, namespace, caPEM)
		}
	case err == nil && cm.Data[CAConfigMapKey] != string(caPEM):
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[CAConfigMapKey] = string(caPEM)
		err = c.Update(ctx, &cm)
	}
	if err != nil {
		return fmt.Errorf("publish the front's CA (ConfigMap %s/%s): %w", namespace, CAConfigMapName, err)
	}
	return nil
}

// clientCertificate is a new client certificate for this replica, signed by ca.
func clientCertificate(ca *pki.CA) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	der, err := ca.Sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: clientCommonName, Organization: []string{"hiloop"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, key.Public(), clientLifetime)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// missingNames are the values of names that cert does not name.
func missingNames(cert *x509.Certificate, names []string) []string {
	var missing []string
	for _, n := range names {
		if cert.VerifyHostname(n) != nil {
			missing = append(missing, n)
		}
	}
	return missing
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// errNoSerial is never expected: crypto/rand does not fail on Linux.
var errNoSerial = errors.New("no random serial number")

func newSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(errNoSerial)
	}
	return n
}
