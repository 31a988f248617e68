// Package store keeps the daemon's durable state in one bbolt file, sandboxd.db: sandbox,
// snapshot, SSH key, session, permission and exposure records and idempotency receipts. It opens
// that file and gives the packages that keep their own buckets there (secrets, logins,
// auditlog, egresslog and usage) not the file but an Area (Owned): a handle whose transactions
// reach only the buckets Buckets declares for that package, and refuse any other. Buckets
// declares every bucket of every file the daemon keeps, with its owner (events.db is
// internal/eventlog's alone, opened by it), and a test walks the files as the daemon makes them
// against that list. It knows nothing of containers or volumes; the sandbox manager is the
// single writer of sandbox state and calls in here for every change.
package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/hiloop/hiloop/internal/identity"
)

var (
	bucketSandboxes   = []byte("sandboxes")   // name → Sandbox JSON
	bucketIdempotency = []byte("idempotency") // key → Receipt JSON
	bucketSnapshots   = []byte("snapshots")   // name → Snapshot JSON
	bucketSSHKeys     = []byte("ssh_keys")    // identity.Key(owner, name) → SSHKey JSON
)

// ErrNotFound is returned for a record that does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists is returned when creating a record whose key is taken.
var ErrExists = errors.New("already exists")

// ReceiptTTL is how long an idempotency receipt is kept.
const ReceiptTTL = 24 * time.Hour

// Store is the daemon's bbolt database.
type Store struct {
	db *bolt.DB

	// decoded keeps the last decoding of each sandbox record with the bytes it came from, so
	// that a list decodes only what changed since the last one. A create lists every record
	// several times (its storage promise, its id range, its host share): decoding 1,000
	// records each time was a third of sandboxd's CPU while creating the 1,000th sandboxes.
	decodedMu sync.Mutex
	decoded   map[string]decodedSandbox
}

// decodedSandbox is a sandbox record and the JSON it was decoded from.
type decodedSandbox struct {
	raw []byte
	sb  Sandbox
}

// Open opens (creating if needed) the database at path. A second daemon on the same file gets
// a clear error instead of waiting forever for the lock.
func Open(path string) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("open %s: the database is locked by another sandboxd using the same --data-dir", path)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketSandboxes, bucketIdempotency, bucketSnapshots, bucketSSHKeys, bucketSessions, bucketPermissions, bucketExposures} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init %s: %w", path, err)
	}
	s := &Store{db: db}
	if err := s.expireReceipts(time.Now()); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Sandbox is the stored record of one sandbox.
type Sandbox struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	Image        string `json:"image"`
	StorageClass string `json:"storage_class"`
	WorkspaceGiB int    `json:"workspace_gib"`
	// RootfsGiB is the size limit of its writable root; 0 (records from before the limit)
	// means api.DefaultRootfsGiB.
	RootfsGiB int     `json:"rootfs_gib,omitempty"`
	CPUs      float64 `json:"cpus"`
	MemoryMB  int     `json:"memory_mb"`
	// IDBase is the first of the sandbox's own range of host uids and gids (as many as
	// internal/runtime's IDRangeSize) that its user namespace maps to; no other record holds an
	// overlapping one. 0 (records from before user namespaces) gets one at the next start.
	IDBase uint32 `json:"id_base,omitempty"`
	// Policy is the sandbox's permission policy; empty (records from before policies) means
	// auto-approve.
	Policy string `json:"permission_policy,omitempty"`
	// Egress is the sandbox's egress policy; nil (records from before policies) means open
	// with no rules.
	Egress    *Egress    `json:"egress,omitempty"`
	State     string     `json:"state"`
	Error     string     `json:"error,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	// DeleteSnapshots records, with the state deleting, that the delete also removes the
	// sandbox's snapshots, so that a delete interrupted by a crash is finished whole.
	DeleteSnapshots bool `json:"delete_snapshots,omitempty"`
	// Unanswered is set while the create that made the sandbox has not returned: a restart undoes
	// such a create whatever state it reached, so that the client's retry with its idempotency
	// key makes the sandbox afresh instead of finding its name taken.
	Unanswered bool `json:"unanswered,omitempty"`
	// Call is the call (with an idempotency key) that made the sandbox or last grew it, so that
	// its retry finds it done although a crash lost its receipt.
	Call Call `json:"call,omitempty"`
	// StartedFrom is the image build the sandbox's root filesystem came from at its last start;
	// its execs get that build's defaults, so that a rebuild of the image reaches a sandbox at
	// its next start and not halfway through a run. nil: never started since it was recorded.
	StartedFrom *ImageBuild `json:"started_from,omitempty"`
}

// ImageBuild is what a sandbox keeps of the image build it runs: the defaults (a container
// image's ENV and WORKDIR) every exec in it gets.
type ImageBuild struct {
	Env     []string `json:"env,omitempty"`
	WorkDir string   `json:"workdir,omitempty"`
	// Built is when that build finished, which names it among the image's builds; zero in
	// records from before it was kept.
	Built time.Time `json:"built,omitzero"`
}

// Egress is a sandbox's stored egress policy, as pkg/api's Egress validated it.
type Egress struct {
	Mode  string   `json:"mode"`
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// CreateSandbox stores a new record; ErrExists if the name is taken.
func (s *Store) CreateSandbox(sb Sandbox) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSandboxes)
		if b.Get([]byte(sb.Name)) != nil {
			return ErrExists
		}
		return putJSON(b, sb.Name, sb)
	})
}

// GetSandbox returns the record named name; ErrNotFound if there is none. Like a list, it
// decodes the record only when its bytes changed since the last decoding: an exec reads its
// sandbox's record three times.
func (s *Store) GetSandbox(name string) (Sandbox, error) {
	var sb Sandbox
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketSandboxes).Get([]byte(name))
		if v == nil {
			s.decodedMu.Lock()
			delete(s.decoded, name)
			s.decodedMu.Unlock()
			return ErrNotFound
		}
		d, err := s.decodedRecord(name, v)
		sb = d.clone()
		return err
	})
	return sb, err
}

// decodedRecord returns the decoding of the record name whose bytes are v, the last one if they
// are unchanged. v is valid only in its transaction; the result is shared: clone it.
func (s *Store) decodedRecord(name string, v []byte) (Sandbox, error) {
	s.decodedMu.Lock()
	defer s.decodedMu.Unlock()
	if d, ok := s.decoded[name]; ok && bytes.Equal(d.raw, v) {
		return d.sb, nil
	}
	d := decodedSandbox{raw: bytes.Clone(v)}
	if err := json.Unmarshal(v, &d.sb); err != nil {
		return Sandbox{}, err
	}
	if s.decoded == nil {
		s.decoded = map[string]decodedSandbox{}
	}
	s.decoded[name] = d
	return d.sb, nil
}

// ListSandboxes returns every record, sorted by name (bbolt's order of the keys). The truth is
// the database's: a record is decoded again whenever its bytes differ from the last decoding.
func (s *Store) ListSandboxes() ([]Sandbox, error) {
	// Sized by the last list's count: growing a slice of 1,000 records from nothing copied
	// and cleared ~1 MB, and a create lists them all several times.
	s.decodedMu.Lock()
	n := len(s.decoded)
	s.decodedMu.Unlock()
	out := make([]Sandbox, 0, n)
	seen := make(map[string]bool, n)
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).ForEach(func(k, v []byte) error {
			name := string(k)
			seen[name] = true
			sb, err := s.decodedRecord(name, v)
			if err != nil {
				return err
			}
			out = append(out, sb.clone())
			return nil
		})
	})
	// Records gone since: a Get meanwhile may have decoded one the list did not see, which
	// costs it one decoding more, no more.
	s.decodedMu.Lock()
	for name := range s.decoded {
		if !seen[name] {
			delete(s.decoded, name)
		}
	}
	s.decodedMu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// clone returns sb with its own copies of what it points to, so that no caller shares them
// with the store's decodings or with another caller.
func (sb Sandbox) clone() Sandbox {
	if sb.Egress != nil {
		e := *sb.Egress
		e.Allow, e.Deny = slices.Clone(e.Allow), slices.Clone(e.Deny)
		sb.Egress = &e
	}
	if sb.StartedAt != nil {
		t := *sb.StartedAt
		sb.StartedAt = &t
	}
	if sb.StartedFrom != nil {
		b := *sb.StartedFrom
		b.Env = slices.Clone(b.Env)
		sb.StartedFrom = &b
	}
	return sb
}

// UpdateSandbox applies fn to the record named name and stores the result atomically.
func (s *Store) UpdateSandbox(name string, fn func(*Sandbox) error) (Sandbox, error) {
	var sb Sandbox
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSandboxes)
		if err := getJSON(b, name, &sb); err != nil {
			return err
		}
		if err := fn(&sb); err != nil {
			return err
		}
		return putJSON(b, name, sb)
	})
	return sb, err
}

// DeleteSandbox removes the record named name; deleting a missing record succeeds.
func (s *Store) DeleteSandbox(name string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).Delete([]byte(name))
	})
}

// Snapshot is the stored record of one snapshot.
type Snapshot struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	Sandbox        string    `json:"sandbox"`
	SandboxID      string    `json:"sandbox_id"`
	State          string    `json:"state"`
	CapacityBytes  int64     `json:"capacity_bytes"`
	AllocatedBytes int64     `json:"allocated_bytes"`
	Reflinked      bool      `json:"reflinked"`
	CreatedAt      time.Time `json:"created_at"`
	// Call is the call (with an idempotency key) that made the snapshot, so that its retry
	// finds it made although a crash lost its receipt.
	Call Call `json:"call,omitempty"`
}

// CreateSnapshot stores a new snapshot record; ErrExists if the name is taken.
func (s *Store) CreateSnapshot(sn Snapshot) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSnapshots)
		if b.Get([]byte(sn.Name)) != nil {
			return ErrExists
		}
		return putJSON(b, sn.Name, sn)
	})
}

// PutSnapshot stores a snapshot record, replacing any of the same name.
func (s *Store) PutSnapshot(sn Snapshot) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return putJSON(tx.Bucket(bucketSnapshots), sn.Name, sn)
	})
}

// GetSnapshot returns the snapshot named name; ErrNotFound if there is none.
func (s *Store) GetSnapshot(name string) (Snapshot, error) {
	var sn Snapshot
	err := s.db.View(func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketSnapshots), name, &sn)
	})
	return sn, err
}

// ListSnapshots returns every snapshot record, sorted by name.
func (s *Store) ListSnapshots() ([]Snapshot, error) {
	var out []Snapshot
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSnapshots).ForEach(func(_, v []byte) error {
			var sn Snapshot
			if err := json.Unmarshal(v, &sn); err != nil {
				return err
			}
			out = append(out, sn)
			return nil
		})
	})
	return out, err
}

// DeleteSnapshot removes the snapshot record named name; deleting a missing one succeeds.
func (s *Store) DeleteSnapshot(name string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSnapshots).Delete([]byte(name))
	})
}

// SSHKey is a stored public key allowed to log in over SSH, to its owner's sandboxes.
type SSHKey struct {
	Name        string    `json:"name"` // identity.Key(owner, name): names are per user
	Type        string    `json:"type"`
	Fingerprint string    `json:"fingerprint"`
	PublicKey   string    `json:"public_key"`
	CreatedAt   time.Time `json:"created_at"`
}

// CreateSSHKey stores a key; ErrExists if its name (its key) is taken, or its fingerprint by
// any user: one public key belongs to one user.
func (s *Store) CreateSSHKey(k SSHKey) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSSHKeys)
		if b.Get([]byte(k.Name)) != nil {
			return ErrExists
		}
		dup := b.ForEach(func(_, v []byte) error {
			var other SSHKey
			if json.Unmarshal(v, &other) == nil && other.Fingerprint == k.Fingerprint {
				return ErrExists
			}
			return nil
		})
		if dup != nil {
			return dup
		}
		return putJSON(b, k.Name, k)
	})
}

// ListSSHKeys returns every key, sorted by name.
func (s *Store) ListSSHKeys() ([]SSHKey, error) {
	var out []SSHKey
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSSHKeys).ForEach(func(_, v []byte) error {
			var k SSHKey
			if err := json.Unmarshal(v, &k); err != nil {
				return err
			}
			out = append(out, k)
			return nil
		})
	})
	return out, err
}

// DeleteSSHKey removes the key named name; ErrNotFound if there is none.
func (s *Store) DeleteSSHKey(name string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSSHKeys)
		if b.Get([]byte(name)) == nil {
			return ErrNotFound
		}
		return b.Delete([]byte(name))
	})
}

// DeleteSSHKeysOf removes every key of the owner namespace (a user who is gone) and returns
// how many there were.
func (s *Store) DeleteSSHKeysOf(namespace string) (int, error) {
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSSHKeys)
		var names [][]byte
		err := b.ForEach(func(k, _ []byte) error {
			if identity.InNamespace(string(k), namespace) {
				names = append(names, slices.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range names {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n = len(names)
		return nil
	})
	return n, err
}

// Receipt is the stored answer to a mutating request made with an idempotency key.
type Receipt struct {
	// Fingerprint identifies the request (method, path and body) the key was first used with.
	Fingerprint string    `json:"fingerprint"`
	Status      int       `json:"status"`
	ContentType string    `json:"content_type,omitempty"`
	Body        []byte    `json:"body"`
	CreatedAt   time.Time `json:"created_at"`
}

// GetReceipt returns the receipt stored under key; ErrNotFound if there is none.
func (s *Store) GetReceipt(key string) (Receipt, error) {
	var r Receipt
	err := s.db.View(func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketIdempotency), key, &r)
	})
	return r, err
}

// PutReceipt stores a receipt under key.
func (s *Store) PutReceipt(key string, r Receipt) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return putJSON(tx.Bucket(bucketIdempotency), key, r)
	})
}

func (s *Store) expireReceipts(now time.Time) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIdempotency)
		var stale [][]byte
		err := b.ForEach(func(k, v []byte) error {
			var r Receipt
			if json.Unmarshal(v, &r) != nil || now.Sub(r.CreatedAt) > ReceiptTTL {
				stale = append(stale, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range stale {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func getJSON(b *bolt.Bucket, key string, v any) error {
	data := b.Get([]byte(key))
	if data == nil {
		return ErrNotFound
	}
	return json.Unmarshal(data, v)
}

func putJSON(b *bolt.Bucket, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), data)
}
