package identity

import "testing"

func TestKeysRoundTripAndNeverCollide(t *testing.T) {
	for _, c := range []struct{ ns, name, key string }{
		{LocalAdmin, "box", "box"},
		{"alice", "box", "alice.box"},
		{"bob", "box", "bob.box"},
	} {
		if got := Key(c.ns, c.name); got != c.key {
			t.Errorf("Key(%q, %q) = %q, want %q", c.ns, c.name, got, c.key)
		}
		ns, name := Split(c.key)
		if ns != c.ns || name != c.name {
			t.Errorf("Split(%q) = %q, %q; want %q, %q", c.key, ns, name, c.ns, c.name)
		}
		if !InNamespace(c.key, c.ns) {
			t.Errorf("%q is not in %q", c.key, c.ns)
		}
	}
	if InNamespace("alice.box", "bob") || InNamespace("box", "alice") || InNamespace("alice.box", LocalAdmin) {
		t.Error("a key is in a namespace not its own")
	}
}

func TestNamespaceIsAsForAnAdminActingAsAnother(t *testing.T) {
	p := Principal{User: "root2", Admin: true, As: "alice"}
	if p.Namespace() != "alice" {
		t.Fatalf("namespace %q, want alice", p.Namespace())
	}
	if Local().Namespace() != LocalAdmin {
		t.Fatal("the local admin's namespace is not its own")
	}
}
