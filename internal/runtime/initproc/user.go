package initproc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// User is a resolved account inside the sandbox.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups
	Home   string
	Shell  string
}

// LookupUser resolves spec (a name or a numeric uid; empty means root) from the sandbox's
// passwd and group files. A numeric uid without a passwd entry is allowed, like in Docker:
// it gets gid 0, home / and shell /bin/sh.
func LookupUser(spec, passwdPath, groupPath string) (*User, error) {
	if spec == "" {
		spec = "0"
	}
	pf, err := os.Open(passwdPath)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var u *User
	if pf != nil {
		u, err = findPasswd(pf, spec)
		pf.Close()
		if err != nil {
			return nil, err
		}
	}
	if u == nil {
		id, perr := strconv.ParseUint(spec, 10, 32)
		if perr != nil {
			return nil, fmt.Errorf("unknown user %q", spec)
		}
		u = &User{Name: spec, UID: uint32(id), Home: "/", Shell: "/bin/sh"}
		if id == 0 {
			u.Name, u.Home = "root", "/root"
		}
	}
	gf, err := os.Open(groupPath)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	if gf != nil {
		u.Groups, err = findGroups(gf, u.Name, u.GID)
		gf.Close()
		if err != nil {
			return nil, err
		}
	}
	return u, nil
}

// findPasswd returns the entry whose name or uid is spec, or nil. Names win over uids.
func findPasswd(r io.Reader, spec string) (*User, error) {
	var byID *User
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < 7 {
			continue
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		u := &User{Name: f[0], UID: uint32(uid), GID: uint32(gid), Home: f[5], Shell: f[6]}
		if u.Home == "" {
			u.Home = "/"
		}
		if u.Shell == "" {
			u.Shell = "/bin/sh"
		}
		if f[0] == spec {
			return u, nil
		}
		if byID == nil && f[2] == spec {
			byID = u
		}
	}
	return byID, s.Err()
}

// findGroups returns the gids of the groups that list name as a member, primary gid excluded.
func findGroups(r io.Reader, name string, primary uint32) ([]uint32, error) {
	var gids []uint32
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < 4 {
			continue
		}
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil || uint32(gid) == primary {
			continue
		}
		for _, m := range strings.Split(f[3], ",") {
			if m == name {
				gids = append(gids, uint32(gid))
				break
			}
		}
	}
	return gids, s.Err()
}
