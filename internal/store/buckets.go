package store

// The daemon's bbolt files, in its data directory.
const (
	// FileState is the daemon's state: this package's records and the buckets of the packages
	// Buckets names, each of which reaches only its own through its Area (Store.Owned).
	FileState = "sandboxd.db"
	// FileEvents is the session event logs, opened, written and compacted by internal/eventlog
	// alone.
	FileEvents = "events.db"
)

// Bucket is a top-level bucket of one of the daemon's bbolt files: which file, its name, the
// package that owns it (the only one that reads or writes it) and what it holds.
type Bucket struct {
	File  string
	Name  string
	Owner string
	Holds string
}

// Buckets is every top-level bucket of every bbolt file the daemon keeps. A package that keeps
// a bucket declares it here; a test opens the files as the daemon makes them and fails on a
// bucket that is there but not here, or here but not there. A package touches only the buckets
// it owns, and no transaction spans two owners: Store.Owned gives each owner of a bucket of
// FileState an Area that refuses any other bucket; the one exception is eventlog.Migrate, which
// once, before the daemon serves, copies an older daemon's sandboxd.db whole to move the event
// buckets out of it.
var Buckets = []Bucket{
	{FileState, "sandboxes", "internal/store", "name → Sandbox JSON"},
	{FileState, "idempotency", "internal/store", "key → Receipt JSON"},
	{FileState, "snapshots", "internal/store", "name → Snapshot JSON"},
	{FileState, "ssh_keys", "internal/store", "identity.Key(owner, name) → SSHKey JSON"},
	{FileState, "sessions", "internal/store", "id → Session JSON"},
	{FileState, "permissions", "internal/store", "session id NUL tool call id → Permission JSON"},
	{FileState, "exposures", "internal/store", "sandbox id / port → Exposure JSON"},
	{FileState, "secrets", "internal/secrets", "name → secret record JSON, the value sealed"},
	{FileState, "secret_attachments", "internal/secrets", "sandbox id NUL secret → Attachment JSON"},
	{FileState, "secrets_meta", "internal/secrets", "the master key's check value, sealed"},
	{FileState, "logins", "internal/logins", "provider → login record JSON, the value sealed"},
	{FileState, "audit", "internal/auditlog", "seq → AuditRecord JSON (internal/seqlog keys)"},
	{FileState, "egress", "internal/egresslog", "sandbox id → seq → EgressRecord JSON (internal/seqlog keys)"},
	{FileState, "users", "internal/users", "name → user record JSON (the built-in admin has none)"},
	{FileState, "user_trust_tokens", "internal/users", "hex SHA-256 of a trust token → its user and expiry JSON"},
	{FileState, "user_api_tokens", "internal/users", "hex SHA-256 of an API token → its user, name, expiry and last use JSON"},
	{FileState, "user_certificates", "internal/users", "client certificate fingerprint → its user, issue and expiry JSON"},
	{FileState, "usage", "internal/usage", "sandbox id → totals, budget, records, hourly roll-ups, sessions"},
	{FileEvents, "events", "internal/eventlog", "session id → seq → SessionEvent JSON (internal/seqlog keys)"},
	{FileEvents, "event_calls", "internal/eventlog", "session id → its last call and that event's seq"},
	{FileEvents, "event_usage", "internal/eventlog", "session id → its events, bytes and sandbox"},
}
