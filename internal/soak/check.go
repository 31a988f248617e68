package soak

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hiloop/hiloop/internal/mountinfo"
	"github.com/hiloop/hiloop/pkg/api"
)

// transitional are the states nothing may stay in once the daemon has reconciled.
var transitional = map[api.SandboxState]bool{
	api.StateCreating: true, api.StateStarting: true, api.StateStopping: true, api.StateDeleting: true,
}

// check compares the daemon with every worker's model. Operations are held meanwhile.
func (s *soak) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	spares := s.settledSpares(ctx)
	list, err := s.c.ListSandboxes(ctx)
	if err != nil {
		s.violate("list", "sandbox list: %v", err)
		return
	}
	snaps, err := s.c.ListSnapshots(ctx, "")
	if err != nil {
		s.violate("list", "snapshot list: %v", err)
		return
	}
	listed := map[string]api.Sandbox{}
	for _, sb := range list {
		listed[sb.Name] = sb
		switch {
		case transitional[sb.State]:
			s.violate("state", "sandbox %s (id %s) is still %s after the restart", sb.Name, sb.ID, sb.State)
		case sb.State == api.StateFailed:
			s.violate("state", "sandbox %s (id %s) failed: %s", sb.Name, sb.ID, sb.Error)
		}
	}
	listedSn := map[string]api.Snapshot{}
	for _, sn := range snaps {
		listedSn[sn.Name] = sn
		if sn.State != api.SnapshotReady {
			s.violate("state", "snapshot %s (id %s) is still %s after the restart", sn.Name, sn.ID, sn.State)
		}
	}
	s.checkDisk(list, snaps, spares)
	owned := map[string]bool{}
	for _, w := range s.workers {
		w.check(ctx, listed, listedSn, owned)
	}
	for _, sb := range list {
		if !owned[sb.Name] {
			s.violate("half-applied", "sandbox %s (id %s, %s) is listed but was never acknowledged, or was deleted", sb.Name, sb.ID, sb.State)
		}
	}
	for _, sn := range snaps {
		if !owned["snapshot "+sn.Name] {
			s.violate("half-applied", "snapshot %s (id %s of %s) is listed but was never acknowledged, or was deleted", sn.Name, sn.ID, sn.Sandbox)
		}
	}
	// Acknowledged calls repeated with their key return their first answer, and do nothing.
	for _, w := range s.workers {
		for _, r := range w.receipts[max(0, len(w.receipts)-2):] {
			s.add(&s.report.Replays)
			got, err := r.replay(ctx)
			if err != nil || got != r.want {
				s.violate("idempotency", "%s repeated with its key answered %q (%v), first answer %q", r.desc, got, err, r.want)
			}
		}
	}
}

// check compares one worker's model with what the daemon lists, noting in owned the sandbox and
// snapshot names the model (or its pending call) accounts for.
func (w *worker) check(ctx context.Context, listed map[string]api.Sandbox, listedSn map[string]api.Snapshot, owned map[string]bool) {
	p := w.pending
	pendingOn := func(name string) bool { return p != nil && p.sandbox == name }
	if p != nil && p.creates {
		owned[p.sandbox] = true
	}
	if p != nil && p.makesSnap {
		owned["snapshot "+p.snapshot] = true
	}
	for name, m := range w.sbs {
		owned[name] = true
		sb, ok := listed[name]
		if !ok {
			if !pendingOn(name) || !p.deletes {
				w.s.violate("lost", "sandbox %s (id %s) was acknowledged and is not listed", name, m.id)
			}
			continue
		}
		if sb.ID != m.id {
			w.s.violate("lost", "sandbox %s is id %s, acknowledged as %s", name, sb.ID, m.id)
			continue
		}
		caps := []int{m.capGiB}
		if pendingOn(name) && p.growTo > 0 {
			caps = append(caps, p.growTo)
		}
		if pendingOn(name) && p.restoreTo != nil {
			caps = append(caps, max(m.capGiB, p.restoreTo.capGiB))
		}
		okCap := false
		for _, c := range caps {
			okCap = okCap || sb.Workspace.CapacityBytes == int64(c)*gib
		}
		if !okCap {
			w.s.violate("size", "sandbox %s has %d bytes, acknowledged %d GiB (pending: %v)", name, sb.Workspace.CapacityBytes, m.capGiB, caps[1:])
		}
		if !pendingOn(name) || !p.runChange {
			switch {
			case m.running && sb.State != api.StateRunning:
				w.s.violate("re-adopted", "sandbox %s was running and is %s after the restart", name, sb.State)
			case !m.running && sb.State != api.StateStopped:
				w.s.violate("state", "sandbox %s was stopped and is %s after the restart", name, sb.State)
			case m.running && sb.StartedAt != nil && !sb.StartedAt.Equal(m.startedAt):
				w.s.violate("re-adopted", "sandbox %s was started again (started_at %s, was %s) instead of being picked up", name, sb.StartedAt.Format(time.RFC3339Nano), m.startedAt.Format(time.RFC3339Nano))
			}
		}
		if sb.State == api.StateRunning && (!pendingOn(name) || p.restoreTo == nil) {
			found, err := w.s.markers(ctx, name)
			if err != nil {
				w.s.violate("re-adopted", "exec in running sandbox %s: %v", name, err)
			} else {
				w.s.compareMarkers("sandbox "+name, m, found)
			}
		}
		if m.session != nil && !(pendingOn(name) && p.deletes) {
			w.s.checkSession(ctx, name, m.session)
		}
	}
	if p != nil && p.newSession {
		if l, err := w.s.c.ListSessions(ctx, p.sandbox); err == nil && len(l) > 1 {
			w.s.violate("idempotency", "sandbox %s has %d sessions while one was asked for", p.sandbox, len(l))
		}
	}
	for name, sn := range w.snaps {
		owned["snapshot "+name] = true
		l, ok := listedSn[name]
		if !ok {
			mayBeGone := p != nil && (p.delSnap && p.snapshot == name || p.deletes && p.withSnaps && p.sandbox == sn.sandbox)
			if !mayBeGone {
				w.s.violate("lost", "snapshot %s (id %s of %s) was acknowledged and is not listed", name, sn.id, sn.sandbox)
			}
			continue
		}
		if l.ID != sn.id || l.CapacityBytes != int64(sn.capGiB)*gib {
			w.s.violate("lost", "snapshot %s is id %s with %d bytes, acknowledged as %s with %d GiB", name, l.ID, l.CapacityBytes, sn.id, sn.capGiB)
		}
	}
}

// compareMarkers checks a workspace's markers: every acknowledged one, and none but those and
// the ones whose write was not answered.
func (s *soak) compareMarkers(what string, m *sandboxModel, found map[string]bool) {
	var missing, extra []string
	for _, k := range sortedKeys(m.markers) {
		if !found[k] {
			missing = append(missing, k)
		}
	}
	for _, k := range sortedKeys(found) {
		if !m.markers[k] && !m.maybe[k] {
			extra = append(extra, k)
		}
	}
	if len(missing) > 0 {
		s.violate("writes", "%s lacks acknowledged writes %v", what, missing)
	}
	if len(extra) > 0 {
		s.violate("writes", "%s holds writes it should not (restored or forked from the wrong state?) %v", what, extra)
	}
}

// checkSession checks a session's event log: seqs 1..last with no hole, every acknowledged
// prompt at its seq exactly once, a turn_end for every prompt, and no turn left running.
func (s *soak) checkSession(ctx context.Context, sandbox string, m *sessionModel) {
	var se api.Session
	for i := 0; ; i++ {
		var err error
		if se, err = s.c.GetSession(ctx, m.id); err != nil {
			s.violate("session", "session %s of %s: %v", m.id, sandbox, err)
			return
		}
		if se.State == api.SessionIdle {
			break
		}
		if i == 100 {
			s.violate("session", "session %s of %s is still %s 10 s after the restart", m.id, sandbox, se.State)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var last uint64
	prompts, turnEnds := 0, 0
	texts := map[string]int{}
	at := map[uint64]string{}
	for ev, err := range s.c.AllEvents(ctx, m.id, 0) {
		if err != nil {
			s.violate("session", "events of session %s: %v", m.id, err)
			return
		}
		if ev.Seq != last+1 {
			s.violate("session", "session %s of %s: seq %d follows %d", m.id, sandbox, ev.Seq, last)
		}
		last = ev.Seq
		switch ev.Type {
		case api.EventPrompt:
			var p api.PromptPost
			_ = json.Unmarshal(ev.Data, &p)
			prompts++
			texts[p.Text]++
			at[ev.Seq] = p.Text
		case api.EventTurnEnd:
			turnEnds++
		}
	}
	if last < se.LastSeq {
		s.violate("session", "session %s of %s: events end at seq %d, last_seq is %d", m.id, sandbox, last, se.LastSeq)
	}
	for seq, text := range m.prompts {
		if at[seq] != text {
			s.violate("session", "session %s of %s: acknowledged prompt %q at seq %d, found %q", m.id, sandbox, text, seq, at[seq])
		}
		if texts[text] > 1 {
			s.violate("idempotency", "session %s of %s: prompt %q stored %d times", m.id, sandbox, text, texts[text])
		}
	}
	for text := range m.maybe {
		if texts[text] > 1 {
			s.violate("idempotency", "session %s of %s: prompt %q stored %d times", m.id, sandbox, text, texts[text])
		}
	}
	if se.State == api.SessionIdle && prompts != turnEnds {
		s.violate("session", "session %s of %s is idle with %d prompts and %d turn ends", m.id, sandbox, prompts, turnEnds)
	}
}

// settledSpares waits until the daemon's spares are all ready (they are made in the background
// after a restart, each with a workspace) and returns their ids: a spare is a running sandbox
// with no record. A pool that does not settle is a violation.
func (s *soak) settledSpares(ctx context.Context) []string {
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := s.c.Version(ctx)
		if err != nil {
			s.violate("list", "version: %v", err)
			return nil
		}
		if v.Spares.Ready == v.Spares.Wanted {
			return v.Spares.IDs
		}
		if time.Now().After(deadline) {
			s.violate("spares", "%d of %d spares ready a minute after the restart", v.Spares.Ready, v.Spares.Wanted)
			return v.Spares.IDs
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkDisk compares the data dir with the lists: a workspace image for every sandbox and
// spare and none other, a copy for every snapshot and none other, mounts only for running
// sandboxes and spares, no seal left over, harness logs only of sandboxes that exist.
func (s *soak) checkDisk(list []api.Sandbox, snaps []api.Snapshot, spares []string) {
	data := s.cfg.Daemon.DataDir()
	ids, running, names := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, sb := range list {
		ids[sb.ID], names[sb.Name] = true, true
		running[sb.ID] = sb.State == api.StateRunning
	}
	for _, id := range spares {
		ids[id], running[id] = true, true
	}
	snapIDs := map[string]bool{}
	for _, sn := range snaps {
		snapIDs[sn.ID] = true
	}
	s.compareFiles("workspace image", filepath.Join(data, "volumes", "*"), ".img", ids)
	s.compareFiles("snapshot copy", filepath.Join(data, "volumes", "snapshots", "*"), ".img", snapIDs)
	mounts, err := mountinfo.Under(filepath.Join(data, "volumes", "mnt"))
	if err != nil {
		s.violate("disk", "read mounts: %v", err)
	}
	for _, m := range mounts {
		if id := filepath.Base(m); !running[id] {
			s.violate("disk", "%s is mounted, and no running sandbox has id %s", m, id)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(data, "volumes", "mnt"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			s.violate("disk", "volumes/mnt/%s is left from a seal the restart should have cleaned", e.Name())
		}
	}
	logs, _ := filepath.Glob(filepath.Join(data, "harness", "*"))
	for _, l := range logs {
		name, _, _ := strings.Cut(filepath.Base(l), ".log")
		if !names[name] {
			s.violate("disk", "harness/%s is left from sandbox %s, which does not exist", filepath.Base(l), name)
		}
	}
}

// compareFiles checks that the files matching pattern are named ID+suffix, those of want.
func (s *soak) compareFiles(what, pattern, suffix string, want map[string]bool) {
	files, err := filepath.Glob(pattern)
	if err != nil {
		s.violate("disk", "%s: %v", pattern, err)
		return
	}
	seen := map[string]bool{}
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.IsDir() {
			continue // volumes/mnt, volumes/snapshots
		}
		id, ok := strings.CutSuffix(filepath.Base(f), suffix)
		if !ok {
			s.violate("stray file", "%s is left from an operation the restart should have finished or undone", f)
			continue
		}
		seen[id] = true
		if !want[id] {
			s.violate("half-applied", "%s %s belongs to nothing listed", what, f)
		}
	}
	for _, id := range sortedKeys(want) {
		if !seen[id] {
			s.violate("half-applied", "%s of %s is missing from %s", what, id, filepath.Dir(pattern))
		}
	}
}
