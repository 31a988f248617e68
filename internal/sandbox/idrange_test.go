package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/store"
	"github.com/hiloop/hiloop/pkg/api"
)

func TestPickIDBase(t *testing.T) {
	const size = runtime.IDRangeSize
	recs := func(bases ...uint32) []store.Sandbox {
		var out []store.Sandbox
		for _, b := range bases {
			out = append(out, store.Sandbox{IDBase: b})
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		recs     []store.Sandbox
		reserved []idSpan
		want     uint32
	}{
		{name: "first", want: FirstIDBase},
		{name: "records before user namespaces hold none", recs: recs(0, 0), want: FirstIDBase},
		{name: "next free", recs: recs(FirstIDBase, FirstIDBase+size), want: FirstIDBase + 2*size},
		{name: "a hole left by a deleted sandbox", recs: recs(FirstIDBase, FirstIDBase+2*size), want: FirstIDBase + size},
		{name: "a subordinate range overlapping the first two", reserved: []idSpan{{FirstIDBase - 10, FirstIDBase + size + 1}}, want: FirstIDBase + 2*size},
		{name: "a host account's id", recs: recs(FirstIDBase), reserved: []idSpan{{FirstIDBase + size + 5, FirstIDBase + size + 6}}, want: FirstIDBase + 2*size},
		{name: "ranges below the first touch nothing", reserved: []idSpan{{100000, 100000 + size}, {1000, 1001}}, want: FirstIDBase},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pickIDBase(tc.recs, tc.reserved, FirstIDBase)
			if err != nil || got != tc.want {
				t.Errorf("pickIDBase = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
	if got, err := pickIDBase(nil, []idSpan{{0, EndIDBase}}, FirstIDBase); err == nil {
		t.Errorf("everything reserved: got %d, want an error", got)
	}
	// From a daemon's own start, wrapping around to FirstIDBase once the slots above are taken.
	last := uint32(FirstIDBase + (idSlots-1)*size)
	if got, err := pickIDBase(recs(last-size), nil, last-size); err != nil || got != last {
		t.Errorf("from the second last slot, taken: %d, %v; want the last, %d", got, err, last)
	}
	if got, err := pickIDBase(recs(last), nil, last); err != nil || got != FirstIDBase {
		t.Errorf("from the last slot, taken: %d, %v; want the first, %d", got, err, FirstIDBase)
	}
	if got, err := pickIDBase(nil, []idSpan{{FirstIDBase, EndIDBase}}, last); err == nil {
		t.Errorf("everything reserved, from the last slot: got %d, want an error", got)
	}
}

// Daemons with different directories start their searches apart, each inside the ranges.
func TestIDStartFor(t *testing.T) {
	a, b := idStartFor("/var/lib/hiloop/layers"), idStartFor("/tmp/hl123/d/layers")
	for _, s := range []uint32{a, b} {
		if s < FirstIDBase || uint64(s)+runtime.IDRangeSize > EndIDBase || (s-FirstIDBase)%runtime.IDRangeSize != 0 {
			t.Errorf("start %d is not a range of [%d, %d)", s, FirstIDBase, EndIDBase)
		}
	}
	if a == b {
		t.Errorf("two directories start at the same range %d", a)
	}
	if again := idStartFor("/var/lib/hiloop/layers"); again != a {
		t.Errorf("a directory's start changes: %d, then %d", a, again)
	}
}

func TestReservedIDs(t *testing.T) {
	dir := t.TempDir()
	subuid := filepath.Join(dir, "subuid")
	passwd := filepath.Join(dir, "passwd")
	if err := os.WriteFile(subuid, []byte("alice:1048576:65536\nbroken line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/sh\nbig:x:1200000:1200000::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := reservedIDs([]string{subuid, passwd, filepath.Join(dir, "missing")})
	if err != nil {
		t.Fatal(err)
	}
	want := []idSpan{{1048576, 1048576 + 65536}, {0, 1}, {1200000, 1200001}}
	if len(got) != len(want) {
		t.Fatalf("reservedIDs = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("reservedIDs = %v, want %v", got, want)
		}
	}
}

// Every sandbox gets its own range at create (a fork too), the runtime is given it, and it
// stays the same across restarts; a record from before user namespaces gets one at its start.
func TestIDRanges(t *testing.T) {
	ctx := context.Background()
	f := newFakeManager(t)
	f.hostIDFiles = nil
	bases := map[uint32]string{}
	for _, name := range []string{"a", "b", "c"} {
		if _, err := f.Create(ctx, api.SandboxesPost{Name: name, Image: "minimal", StorageClass: api.StorageDurable}); err != nil {
			t.Fatal(err)
		}
		rec, _ := f.store.GetSandbox(name)
		if rec.IDBase < FirstIDBase || bases[rec.IDBase] != "" {
			t.Fatalf("%s got range %d (taken by %q)", name, rec.IDBase, bases[rec.IDBase])
		}
		bases[rec.IDBase] = name
		if f.rt.lastSpec.IDBase != rec.IDBase {
			t.Errorf("%s: the runtime got range %d, the record says %d", name, f.rt.lastSpec.IDBase, rec.IDBase)
		}
	}
	a, _ := f.store.GetSandbox("a")
	if _, err := f.Stop(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Start(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if f.rt.lastSpec.IDBase != a.IDBase {
		t.Errorf("restart of a: range %d, want its recorded %d", f.rt.lastSpec.IDBase, a.IDBase)
	}

	// A record written before user namespaces: no range until it starts.
	old := store.Sandbox{ID: "0123456789ab", Name: "old", Image: "minimal", StorageClass: string(api.StorageDurable), State: string(api.StateStopped)}
	if err := f.store.CreateSandbox(old); err != nil {
		t.Fatal(err)
	}
	if _, err := f.vol.Create(ctx, old.ID, 0, AgentUID, AgentGID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Start(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	old, _ = f.store.GetSandbox("old")
	if old.IDBase < FirstIDBase || bases[old.IDBase] != "" || f.rt.lastSpec.IDBase != old.IDBase {
		t.Errorf("old sandbox got range %d (runtime %d), taken by %q", old.IDBase, f.rt.lastSpec.IDBase, bases[old.IDBase])
	}
}
