package store

import (
	"bytes"
	"encoding/json"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketSessions    = []byte("sessions")    // id → Session JSON
	bucketPermissions = []byte("permissions") // session id \x00 tool call id → Permission JSON
)

// Session is the stored record of one agent session. Its events live in the session log.
type Session struct {
	ID        string `json:"id"`
	Sandbox   string `json:"sandbox"`
	SandboxID string `json:"sandbox_id"`
	Harness   string `json:"harness"`
	Cwd       string `json:"cwd"`
	// Policy overrides the sandbox's permission policy; empty inherits it.
	Policy string `json:"permission_policy,omitempty"`
	// ACPSessionID is the harness's id of the session, once a harness has served it.
	ACPSessionID string    `json:"acp_session_id,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	// Call is the call (with an idempotency key) that made the session, so that its retry
	// finds it made although a crash lost its receipt.
	Call Call `json:"call,omitempty"`
}

// CreateSession stores a new session; ErrExists if the id is taken.
func (s *Store) CreateSession(se Session) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		if b.Get([]byte(se.ID)) != nil {
			return ErrExists
		}
		return putJSON(b, se.ID, se)
	})
}

// GetSession returns the session with id; ErrNotFound if there is none.
func (s *Store) GetSession(id string) (Session, error) {
	var se Session
	err := s.db.View(func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketSessions), id, &se)
	})
	return se, err
}

// ListSessions returns every session, oldest first.
func (s *Store) ListSessions() ([]Session, error) {
	var out []Session
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).ForEach(func(_, v []byte) error {
			var se Session
			if err := json.Unmarshal(v, &se); err != nil {
				return err
			}
			out = append(out, se)
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, err
}

// UpdateSession applies fn to the session with id and stores the result.
func (s *Store) UpdateSession(id string, fn func(*Session) error) (Session, error) {
	var se Session
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		if err := getJSON(b, id, &se); err != nil {
			return err
		}
		if err := fn(&se); err != nil {
			return err
		}
		return putJSON(b, id, se)
	})
	return se, err
}

// DeleteSession removes a session and its permission records; deleting a missing one succeeds.
func (s *Store) DeleteSession(id string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketSessions).Delete([]byte(id)); err != nil {
			return err
		}
		c := tx.Bucket(bucketPermissions).Cursor()
		prefix := permissionPrefix(id)
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

// PermissionOption is one answer a harness offered to a permission request.
type PermissionOption struct {
	OptionID string `json:"option_id"`
	Kind     string `json:"kind"`
	Name     string `json:"name"`
}

// Permission is a harness's permission request in a session and, once decided, its decision.
type Permission struct {
	Session    string             `json:"session"`
	ToolCallID string             `json:"tool_call_id"`
	Options    []PermissionOption `json:"options"`
	Decided    bool               `json:"decided"`
	Outcome    string             `json:"outcome,omitempty"` // selected or cancelled
	OptionID   string             `json:"option_id,omitempty"`
	Kind       string             `json:"kind,omitempty"`
	By         string             `json:"by,omitempty"`
	Operator   string             `json:"operator,omitempty"` // who answered, as their answer named them
	CreatedAt  time.Time          `json:"created_at"`
}

func permissionPrefix(session string) []byte { return []byte(session + "\x00") }

func permissionKey(session, toolCallID string) string { return session + "\x00" + toolCallID }

// PutPermission stores a permission record, replacing any for the same (session, tool call id).
func (s *Store) PutPermission(p Permission) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return putJSON(tx.Bucket(bucketPermissions), permissionKey(p.Session, p.ToolCallID), p)
	})
}

// GetPermission returns the record of (session, tool call id); ErrNotFound if there is none.
func (s *Store) GetPermission(session, toolCallID string) (Permission, error) {
	var p Permission
	err := s.db.View(func(tx *bolt.Tx) error {
		return getJSON(tx.Bucket(bucketPermissions), permissionKey(session, toolCallID), &p)
	})
	return p, err
}

// UndecidedPermissions returns the session's requests nobody has decided yet.
func (s *Store) UndecidedPermissions(session string) ([]Permission, error) {
	var out []Permission
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketPermissions).Cursor()
		prefix := permissionPrefix(session)
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var p Permission
			if err := json.Unmarshal(v, &p); err != nil {
				return err
			}
			if !p.Decided {
				out = append(out, p)
			}
		}
		return nil
	})
	return out, err
}
