package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hiloop/hiloop/pkg/api"
)

// SetAs sends Hiloop-As on every call until it is cleared, and AllUsers asks a list for every
// user's.
func TestSetAsAndAllUsers(t *testing.T) {
	var as, query string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		as, query = r.Header.Get(api.AsHeader), r.URL.RawQuery
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"sandboxes":[{"name":"web","owner":"bob"}]}`))
	}))
	defer srv.Close()
	c, err := New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.ListSandboxes(ctx); err != nil || as != "" || query != "" {
		t.Fatalf("plain list: as %q, query %q, %v", as, query, err)
	}
	c.SetAs("bob")
	list, err := c.ListSandboxes(ctx, AllUsers())
	if err != nil || as != "bob" || query != "all_users=true" {
		t.Fatalf("as bob, all users: as %q, query %q, %v", as, query, err)
	}
	if len(list) != 1 || list[0].Owner != "bob" {
		t.Errorf("list = %+v, want web of bob", list)
	}
	c.SetAs("")
	if _, err := c.ListSandboxes(ctx); err != nil || as != "" {
		t.Errorf("after SetAs(\"\"): as %q, %v", as, err)
	}
}
