package store

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s, path
}

func TestSandboxRecords(t *testing.T) {
	s, path := openTemp(t)
	a := Sandbox{ID: "1", Name: "b-second", State: "running"}
	b := Sandbox{ID: "2", Name: "a-first", State: "stopped"}
	for _, sb := range []Sandbox{a, b} {
		if err := s.CreateSandbox(sb); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateSandbox(a); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	got, err := s.UpdateSandbox("b-second", func(sb *Sandbox) error { sb.State = "stopping"; return nil })
	if err != nil || got.State != "stopping" {
		t.Fatalf("update: %+v %v", got, err)
	}
	boom := errors.New("boom")
	if _, err := s.UpdateSandbox("b-second", func(sb *Sandbox) error { sb.State = "x"; return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed update: %v", err)
	}
	if _, err := s.UpdateSandbox("nope", func(*Sandbox) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update missing: %v", err)
	}
	// Survives a reopen, sorted by name, and the failed update changed nothing.
	s.Close()
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	list, err := s.ListSandboxes()
	if err != nil || len(list) != 2 || list[0].Name != "a-first" || list[1].State != "stopping" {
		t.Fatalf("list after reopen: %+v %v", list, err)
	}
	if err := s.DeleteSandbox("a-first"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox("a-first"); err != nil {
		t.Fatalf("delete twice: %v", err)
	}
	if _, err := s.GetSandbox("a-first"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
}

func TestReceiptsExpire(t *testing.T) {
	s, path := openTemp(t)
	if err := s.PutReceipt("old", Receipt{Fingerprint: "f", Status: 201, CreatedAt: time.Now().Add(-2 * ReceiptTTL)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutReceipt("new", Receipt{Fingerprint: "g", Status: 201, Body: []byte("{}"), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetReceipt("old"); !errors.Is(err, ErrNotFound) {
		t.Errorf("old receipt kept: %v", err)
	}
	if r, err := s.GetReceipt("new"); err != nil || r.Fingerprint != "g" || string(r.Body) != "{}" {
		t.Errorf("new receipt: %+v %v", r, err)
	}
}

func TestSecondOpenFailsClearly(t *testing.T) {
	_, path := openTemp(t)
	_, err := Open(path)
	if err == nil || !strings.Contains(err.Error(), "locked by another sandboxd") {
		t.Fatalf("second open: %v", err)
	}
}
