package api

import "time"

// SSHKeysPost is the body of POST /v1/ssh-keys.
type SSHKeysPost struct {
	// Name names the key, e.g. "laptop"; the naming rule of sandboxes applies.
	Name string `json:"name"`
	// PublicKey is one line in authorized_keys format, e.g. "ssh-ed25519 AAAAC3... me@laptop".
	PublicKey string `json:"public_key"`
}

// SSHKey is a public key allowed to log in to the SSH endpoint, to its owner's sandboxes (an
// admin's: to every user's). One public key belongs to one user.
type SSHKey struct {
	// Name names the key, among its owner's keys.
	Name string `json:"name"`
	// Type is the key's algorithm, e.g. "ssh-ed25519".
	Type string `json:"type"`
	// Fingerprint is the key's SHA256 fingerprint as ssh-keygen -l prints it.
	Fingerprint string `json:"fingerprint"`
	// PublicKey is the key in authorized_keys format.
	PublicKey string `json:"public_key"`
	// CreatedAt is when the key was added.
	CreatedAt time.Time `json:"created_at"`
	// Owner is the user who registered the key: the SSH endpoint lets it into their sandboxes.
	Owner string `json:"owner"`
}

// SSHKeyList is the body of GET /v1/ssh-keys: the caller's keys, or with all_users=true (an
// admin only) every user's.
type SSHKeyList struct {
	Keys []SSHKey `json:"keys"`
}

// SSHInfo is how to reach a sandbox over the SSH endpoint: GET /v1/sandboxes/{name}/ssh.
type SSHInfo struct {
	// Host and Port are the endpoint's address, e.g. "127.0.0.1" and 2222.
	Host string `json:"host"`
	Port int    `json:"port"`
	// User is the SSH user name, which selects the sandbox: its name, which the endpoint looks
	// up among the sandboxes of the key's owner (an admin reaches another user's as
	// USER.NAME).
	User string `json:"user"`
	// HostKey is the endpoint's host key in authorized_keys format, to pin in known_hosts.
	HostKey string `json:"host_key"`
}
