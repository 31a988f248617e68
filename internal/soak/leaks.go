package soak

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hiloop/hiloop/internal/hostleaks"
	"github.com/hiloop/hiloop/pkg/api"
)

// finish forks every snapshot once (each must give a sandbox holding its writes), deletes
// everything, checks the data dir holds nothing of it, stops the daemon and checks that nothing
// is left on the host.
func (s *soak) finish(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for _, w := range s.workers {
		for _, sn := range w.snaps {
			name := fmt.Sprintf("fk-%s", sn.name)
			sb, err := s.c.CreateSandbox(ctx, api.SandboxesPost{Name: name, Image: s.cfg.Image, FromSnapshot: sn.name})
			s.count("fork")
			if err != nil {
				s.violate("fork", "snapshot %s cannot be forked: %v", sn.name, err)
				continue
			}
			m := &sandboxModel{name: name, markers: sn.markers, maybe: sn.maybe}
			if found, err := s.markers(ctx, name); err != nil {
				s.violate("fork", "exec in %s forked from %s: %v", name, sn.name, err)
			} else {
				s.compareMarkers(fmt.Sprintf("%s forked from %s", name, sn.name), m, found)
			}
			if sb.Workspace.CapacityBytes != int64(sn.capGiB)*gib {
				s.violate("size", "%s forked from %s has %d bytes, want %d GiB", name, sn.name, sb.Workspace.CapacityBytes, sn.capGiB)
			}
		}
	}
	if list, err := s.c.ListSandboxes(ctx); err != nil {
		s.violate("end", "sandbox list: %v", err)
	} else {
		for _, sb := range list {
			s.count("delete")
			if err := s.c.DeleteSandbox(ctx, sb.Name, true); err != nil {
				s.violate("end", "delete %s: %v", sb.Name, err)
			}
		}
	}
	if snaps, err := s.c.ListSnapshots(ctx, ""); err != nil {
		s.violate("end", "snapshot list: %v", err)
	} else {
		for _, sn := range snaps {
			s.count("snapshot-delete")
			if err := s.c.DeleteSnapshot(ctx, sn.Name); err != nil {
				s.violate("end", "delete snapshot %s: %v", sn.Name, err)
			}
		}
	}
	// The pool is mounted while the daemon runs: look into it before stopping. The daemon's
	// spares are all it may hold now; its stop removes them, and the host is checked after.
	spares := s.settledSpares(ctx)
	data := s.cfg.Daemon.DataDir()
	for _, pattern := range []string{"volumes/*.img", "volumes/snapshots/*", "volumes/mnt/*", "volumes/mnt/.*", "harness/*", "sandboxes/*", "runtime/*", "run/*"} {
		files, _ := filepath.Glob(filepath.Join(data, pattern))
		for _, f := range files {
			if !slices.ContainsFunc(spares, func(id string) bool { return strings.HasPrefix(filepath.Base(f), id) }) {
				s.violate("stray file", "%s is left after every sandbox and snapshot was deleted", f)
			}
		}
	}
	s.cfg.Daemon.Stop()
	// A killed sandbox's last processes may still be on their way out (zombies until reaped).
	leaks := hostleaks.Find(data)
	for i := 0; len(leaks) > 0 && i < 100; i++ {
		time.Sleep(100 * time.Millisecond)
		leaks = hostleaks.Find(data)
	}
	for _, l := range leaks {
		s.violate("leak", "%s", l)
	}
}
