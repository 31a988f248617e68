package sandbox

import (
	"bufio"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"strings"

	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/store"
)

// Every sandbox runs in its own user namespace with its own range of runtime.IDRangeSize host
// uids and gids: root inside is host id IDBase, agent (1000) is IDBase+1000. The ranges are
// handed out by the manager, recorded in the sandbox's record and never given to another
// sandbox while that record exists.
const (
	// FirstIDBase is where the ranges start: far above host accounts (useradd's uids end at
	// 60000) and the first subordinate ranges useradd gives (from 100000); the ranges of
	// /etc/subuid and /etc/subgid, and the ids of /etc/passwd and /etc/group, are skipped
	// wherever they are.
	FirstIDBase = 1 << 20
	// EndIDBase bounds the ranges: ids stay below 2^31, which some tools read as signed.
	EndIDBase = 1 << 31
)

// hostIDFiles are the files whose ids and ranges sandboxes' ranges never overlap.
var hostIDFiles = []string{"/etc/subuid", "/etc/subgid", "/etc/passwd", "/etc/group"}

// idSpan is the host ids [start, end).
type idSpan struct{ start, end uint64 }

// idSlots is how many ranges fit between FirstIDBase and EndIDBase.
const idSlots = (EndIDBase - FirstIDBase) / runtime.IDRangeSize

// idStartFor is where a daemon keeping its sandboxes' directories in dir starts looking for
// free ranges: a slot picked by a hash of dir. Daemons do not see each other's records, so two
// on one host (an operator's second data dir, the tests' many daemons) that all started at
// FirstIDBase would give their first sandboxes the same host ids, and with them the same
// per-user kernel counts (inotify instances, processes) and the same owner of their files.
func idStartFor(dir string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(dir))
	return FirstIDBase + h.Sum32()%idSlots*runtime.IDRangeSize
}

// pickIDBase returns the first range start from start (then from FirstIDBase, once the slots
// above start are all taken) that no record uses and that overlaps none of reserved.
func pickIDBase(recs []store.Sandbox, reserved []idSpan, start uint32) (uint32, error) {
	used := map[uint32]bool{}
	for _, r := range recs {
		used[r.IDBase] = true
	}
	first := (uint64(start) - FirstIDBase) / runtime.IDRangeSize % idSlots
next:
	for i := range uint64(idSlots) {
		base := FirstIDBase + (first+i)%idSlots*runtime.IDRangeSize
		if used[uint32(base)] {
			continue
		}
		for _, r := range reserved {
			if r.start < base+runtime.IDRangeSize && base < r.end {
				continue next
			}
		}
		return uint32(base), nil
	}
	return 0, fmt.Errorf("no free range of %d host ids left for a sandbox's user namespace between %d and %d", runtime.IDRangeSize, FirstIDBase, EndIDBase)
}

// reservedIDs reads the host's ranges (name:start:count) and accounts (name:x:id:...) from
// files; a missing file reserves nothing.
func reservedIDs(files []string) ([]idSpan, error) {
	var spans []idSpan
	for _, name := range files {
		f, err := os.Open(name)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("host ids: %w", err)
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			fields := strings.Split(s.Text(), ":")
			switch {
			case len(fields) == 3: // subordinate range
				start, err1 := strconv.ParseUint(fields[1], 10, 32)
				count, err2 := strconv.ParseUint(fields[2], 10, 32)
				if err1 == nil && err2 == nil {
					spans = append(spans, idSpan{start, start + count})
				}
			case len(fields) >= 4: // passwd or group entry: the id is the third field
				if id, err := strconv.ParseUint(fields[2], 10, 32); err == nil {
					spans = append(spans, idSpan{id, id + 1})
				}
			}
		}
		err = s.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("host ids: read %s: %w", name, err)
		}
	}
	return spans, nil
}

// assignIDBase gives rec a range of host ids if it has none (a new sandbox, or one recorded
// before user namespaces); the caller stores rec. Assignments are serialized, and each looks
// at every record, so two sandboxes never get one range.
func (m *Manager) assignIDBase(rec *store.Sandbox, save func(*store.Sandbox) error) error {
	if rec.IDBase != 0 {
		return nil
	}
	m.idMu.Lock()
	defer m.idMu.Unlock()
	base, err := m.freeIDBase()
	if err != nil {
		return err
	}
	rec.IDBase = base
	if err := save(rec); err != nil {
		rec.IDBase = 0
		return err
	}
	return nil
}

// reserveIDBase picks a range of host ids for a sandbox with no record yet (a build sandbox, a
// spare) that no record and no other such sandbox uses, and holds it until releaseIDBase.
func (m *Manager) reserveIDBase() (uint32, error) {
	m.idMu.Lock()
	defer m.idMu.Unlock()
	base, err := m.freeIDBase()
	if err != nil {
		return 0, err
	}
	if m.heldBases == nil {
		m.heldBases = map[uint32]bool{}
	}
	m.heldBases[base] = true
	return base, nil
}

// freeIDBase picks a range that no record, no held range and none of the host's own ids or
// subordinate ranges overlap; the caller holds idMu.
func (m *Manager) freeIDBase() (uint32, error) {
	recs, err := m.store.ListSandboxes()
	if err != nil {
		return 0, err
	}
	reserved, err := reservedIDs(m.hostIDFiles)
	if err != nil {
		return 0, err
	}
	for b := range m.heldBases {
		reserved = append(reserved, idSpan{uint64(b), uint64(b) + runtime.IDRangeSize})
	}
	return pickIDBase(recs, reserved, m.idStart)
}

// releaseIDBase gives back a range reserveIDBase held: nothing runs in it any more, or a record
// holds it now.
func (m *Manager) releaseIDBase(base uint32) {
	m.idMu.Lock()
	defer m.idMu.Unlock()
	delete(m.heldBases, base)
}
