package fake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"github.com/hiloop/hiloop/internal/atomicfile"
)

// record is a session as persisted in <state>/sessions/<id>.json.
type record struct {
	ID    string       `json:"id"`
	Cwd   string       `json:"cwd"`
	Turns []turnRecord `json:"turns"`
}

// turnRecord is one finished turn: the prompt's text and the agent messages it produced.
type turnRecord struct {
	Prompt  string   `json:"prompt"`
	Replies []string `json:"replies,omitempty"`
}

// validID keeps a session id from naming a path outside sessions/.
var validID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// store keeps sessions and the configuration in a state directory.
type store struct{ dir string }

// config reads config.json; a missing file or field means true.
func (s store) config() (Config, error) {
	cfg := Config{Load: true, Resume: true}
	data, err := os.ReadFile(filepath.Join(s.dir, ConfigFile))
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return cfg, err
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return cfg, fmt.Errorf("%s: %w", filepath.Join(s.dir, ConfigFile), err)
	}
	return cfg, nil
}

func newSessionID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // never fails on Linux
	return "fake-" + hex.EncodeToString(b)
}

func (s store) path(id string) string {
	return filepath.Join(s.dir, "sessions", id+".json")
}

// load reads a session; ok is false when there is no such session.
func (s store) load(id string) (rec record, ok bool, err error) {
	if !validID.MatchString(id) {
		return rec, false, nil
	}
	data, err := os.ReadFile(s.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, err
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, false, fmt.Errorf("%s: %w", s.path(id), err)
	}
	return rec, true, nil
}

// save writes a session atomically, so a crash leaves the previous version or the new one.
func (s store) save(rec record) error {
	data := rec.appendIndented(make([]byte, 0, rec.sizeHint()))
	dir := filepath.Dir(s.path(rec.ID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(s.path(rec.ID), append(data, '\n'), 0o600)
}

// appendIndented appends the record as json.MarshalIndent(rec, "", "  ") encodes it (the tests
// hold the two to the same bytes). A session's whole history is rewritten after every turn, and
// after a chatty one that is tens of thousands of replies: encoding/json's reflection over each
// string and second pass to indent were most of what the agent spent on a turn.
func (rec record) appendIndented(b []byte) []byte {
	b = append(b, "{\n  \"id\": "...)
	b = appendJSONString(b, rec.ID)
	b = append(b, ",\n  \"cwd\": "...)
	b = appendJSONString(b, rec.Cwd)
	b = append(b, ",\n  \"turns\": "...)
	switch {
	case rec.Turns == nil:
		b = append(b, "null"...)
	case len(rec.Turns) == 0:
		b = append(b, "[]"...)
	default:
		b = append(b, '[')
		for i, t := range rec.Turns {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, "\n    {\n      \"prompt\": "...)
			b = appendJSONString(b, t.Prompt)
			if len(t.Replies) > 0 { // omitempty
				b = append(b, ",\n      \"replies\": ["...)
				for j, r := range t.Replies {
					if j > 0 {
						b = append(b, ',')
					}
					b = append(b, "\n        "...)
					b = appendJSONString(b, r)
				}
				b = append(b, "\n      ]"...)
			}
			b = append(b, "\n    }"...)
		}
		b = append(b, "\n  ]"...)
	}
	return append(b, "\n}"...)
}

// sizeHint is about the size of the record's encoding, to allocate it at once.
func (rec record) sizeHint() int {
	n := 64 + len(rec.ID) + len(rec.Cwd)
	for _, t := range rec.Turns {
		n += 40 + len(t.Prompt)
		for _, r := range t.Replies {
			n += 12 + len(r)
		}
	}
	return n
}
