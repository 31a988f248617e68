package daemon

import (
	"crypto/x509"
	"time"

	"github.com/hiloop/hiloop/internal/users"
	"github.com/hiloop/hiloop/pkg/api"
)

// userStore is where the authenticator and the user routes find users and their credentials:
// the host's bbolt file on a single host (users.Store), the cluster's User resources on a
// cluster's front (internal/cluster/users.Store). Both answer with the same errors and codes.
type userStore interface {
	Add(name string, o users.AddOptions) (api.UserCreated, error)
	NewTrustToken(name string, ttl time.Duration) (api.UserCreated, error)
	Exchange(token string, sign func(user string) (*x509.Certificate, error)) (api.TrustAnswer, error)
	Get(name string) (api.User, error)
	List() ([]api.User, error)
	Remove(name string) error
	CreateToken(user, name string, ttl time.Duration) (api.TokenCreated, error)
	Tokens(user string) ([]api.APIToken, error)
	RevokeToken(user, name string) error
	LiveToken(id string) (bool, error)
	ByToken(value string) (who users.Who, name string, ok bool, err error)
	ByCertificate(fingerprint string) (who users.Who, ok bool, err error)
	OnRevoke(fn func(user string))
	OnRevokeCredential(fn func(users.Revoked))
}

// The cluster's store is asserted in userstore_test.go, so that the single host's daemon does
// not link the Kubernetes client.
var _ userStore = (*users.Store)(nil)
