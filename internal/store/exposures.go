package store

import (
	"bytes"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

var bucketExposures = []byte("exposures") // sandbox id / port (5 digits) → Exposure JSON

// Exposure is the stored record of one exposed port of a sandbox: what the daemon listens on
// for it, from its start to the exposure's removal. It belongs to the sandbox's id, so that a
// sandbox deleted and made again under the same name does not inherit it.
type Exposure struct {
	SandboxID   string `json:"sandbox_id"`
	SandboxName string `json:"sandbox_name"`
	Port        int    `json:"port"`
	HostAddr    string `json:"host_addr"`
	HostPort    int    `json:"host_port"`
	// Auth exposures let only their owner's credential through; Secret is the key their
	// tokens and cookies are signed with, made with the exposure, so that they outlive a
	// daemon restart and die with the exposure.
	Auth   bool   `json:"auth,omitempty"`
	Secret []byte `json:"secret,omitempty"`
}

func exposureKey(sandboxID string, port int) []byte {
	return fmt.Appendf(nil, "%s/%05d", sandboxID, port)
}

// PutExposure stores e; ErrExists if the sandbox's port has an exposure already.
func (s *Store) PutExposure(e Exposure) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketExposures)
		k := exposureKey(e.SandboxID, e.Port)
		if b.Get(k) != nil {
			return ErrExists
		}
		return putJSON(b, string(k), e)
	})
}

// DeleteExposure removes the exposure of a sandbox's port; ErrNotFound if there is none.
func (s *Store) DeleteExposure(sandboxID string, port int) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketExposures)
		k := exposureKey(sandboxID, port)
		if b.Get(k) == nil {
			return ErrNotFound
		}
		return b.Delete(k)
	})
}

// DeleteSandboxExposures removes every exposure of the sandbox with id sandboxID.
func (s *Store) DeleteSandboxExposures(sandboxID string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketExposures).Cursor()
		prefix := []byte(sandboxID + "/")
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

// Exposures returns every stored exposure, by sandbox id and port.
func (s *Store) Exposures() ([]Exposure, error) {
	var out []Exposure
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketExposures).ForEach(func(k, v []byte) error {
			var e Exposure
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("exposure %s: %w", k, err)
			}
			out = append(out, e)
			return nil
		})
	})
	return out, err
}
