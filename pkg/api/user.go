package api

import "time"

// The users of a daemon (docs/api.md, "Users"). The unix socket's requests act as the built-in
// admin user "admin"; a request on the TLS listener acts as the user of its client certificate
// or of its API token (Authorization: Bearer). Only admins reach these routes, except
// POST /v1/trust, which takes no credential but a trust token.

// AsHeader names, on an admin's request, the user whose namespace the request acts in.
const AsHeader = "Hiloop-As"

// FrontUserHeader and FrontAdminHeader name, on a request a cluster's front sends a node agent
// (sandboxd --front-ca), the user the request acts as and whether they are an admin ("true").
// A node agent reads them only from a client whose certificate a front CA signed.
const (
	FrontUserHeader  = "Hiloop-Front-User"
	FrontAdminHeader = "Hiloop-Front-Admin"
)

// UsersPost is the body of POST /v1/users.
type UsersPost struct {
	// Name is the user's name: the sandbox naming rule (1-63 of a-z0-9-, starting with a
	// letter); "admin" is taken by the unix socket's user.
	Name string `json:"name"`
	// Admin users see and act on every user's resources, and manage users.
	Admin bool `json:"admin,omitempty"`
	// TrustTokenTTL is how long the trust token is good for, e.g. "24h" (the default), at most
	// 30 days.
	TrustTokenTTL string `json:"trust_token_ttl,omitempty"`
	// Namespace is, on a cluster, the Kubernetes namespace the user's sandboxes live in, e.g.
	// "team-a" (default: the front's --default-user-namespace). A single host refuses one.
	Namespace string `json:"namespace,omitempty"`
}

// User is a user of the daemon.
type User struct {
	Name      string    `json:"name"`
	Admin     bool      `json:"admin"`
	CreatedAt time.Time `json:"created_at"`
	// Certificates are the client certificates issued to the user, by fingerprint.
	Certificates []UserCertificate `json:"certificates,omitempty"`
	// Tokens are the user's API tokens, by name (never their values).
	Tokens []APIToken `json:"tokens,omitempty"`
	// TrustTokenExpiresAt is when the user's unused trust token expires, while one is pending.
	TrustTokenExpiresAt *time.Time `json:"trust_token_expires_at,omitempty"`
}

// UserCreated answers POST /v1/users (and POST /v1/users/{name}/trust-token, which makes a
// new one): the trust token is shown once, and only its hash is kept.
type UserCreated struct {
	User       User      `json:"user"`
	TrustToken string    `json:"trust_token"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// UserList answers GET /v1/users.
type UserList struct {
	Users []User `json:"users"`
}

// UserCertificate is a client certificate the daemon issued.
type UserCertificate struct {
	// Fingerprint is "SHA256:" and the unpadded base64 of the SHA-256 of the certificate's DER.
	Fingerprint string    `json:"fingerprint"`
	IssuedAt    time.Time `json:"issued_at"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// TokensPost is the body of POST /v1/users/{name}/tokens.
type TokensPost struct {
	// Name tells the token from the user's others, e.g. "ci" (the naming rule).
	Name string `json:"name"`
	// TTL is how long the token is good for, e.g. "30d" or "720h"; empty: until revoked.
	TTL string `json:"ttl,omitempty"`
}

// APIToken describes an API token; its value is shown once, at creation (TokenCreated).
type APIToken struct {
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// TokenCreated answers POST /v1/users/{name}/tokens.
type TokenCreated struct {
	Token APIToken `json:"token"`
	// Value is the bearer token, "hl_" and random characters: shown once, kept only as a hash.
	Value string `json:"value"`
}

// TokenList answers GET /v1/users/{name}/tokens.
type TokenList struct {
	Tokens []APIToken `json:"tokens"`
}

// TrustPost is the body of POST /v1/trust: a trust token traded, once, for a client
// certificate over the key of the CSR (made on the client; the key never leaves it).
type TrustPost struct {
	Token string `json:"token"`
	// CSR is a PEM "CERTIFICATE REQUEST"; its subject is ignored (the certificate names the
	// token's user).
	CSR string `json:"csr"`
}

// TrustAnswer answers POST /v1/trust.
type TrustAnswer struct {
	User string `json:"user"`
	// Certificate is the PEM client certificate, signed by the daemon's CA.
	Certificate string    `json:"certificate"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// WhoAmI answers GET /v1/whoami: the user a request acts as.
type WhoAmI struct {
	User  string `json:"user"`
	Admin bool   `json:"admin"`
	// Via is how the request authenticated: "unix", "certificate", "token", or "front" (a
	// cluster's front, on behalf of User).
	Via string `json:"via"`
	// Token names the API token when Via is "token".
	Token string `json:"token,omitempty"`
}
