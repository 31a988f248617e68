//go:build linux

package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// The user every sandbox runs its commands as (see internal/sandbox's AgentUID).
const (
	agentName = "agent"
	agentUID  = 1000
)

// sudoersRule lets agent become root inside its own sandbox, as in the definitions' images.
const sudoersRule = "agent ALL=(ALL:ALL) NOPASSWD: ALL\n"

// adapt makes an extracted container image a sandbox image: it refuses one without /bin/sh (a
// sandbox runs commands through it), and adds the agent user and sudo, with a rule letting agent
// run anything as root, where the image lacks them. It returns what it added, each also reported
// as a stage; what it could not add is a warning in the progress. runner installs sudo (nil: it
// is not installed).
func adapt(ctx context.Context, name, rootfs string, runner StepRunner, progress io.Writer) ([]string, error) {
	if !executable(rootfs, "/bin/sh") {
		return nil, fmt.Errorf("%w: it has no /bin/sh, which a sandbox runs its commands with", ErrInvalidImage)
	}
	var added []string
	user, err := ensureAgent(rootfs, progress)
	if err != nil {
		return nil, fmt.Errorf("add user %s: %w", agentName, err)
	}
	added = append(added, user...)
	sudo, err := ensureSudo(ctx, name, rootfs, runner, progress)
	if err != nil {
		return nil, fmt.Errorf("add sudo: %w", err)
	}
	added = append(added, sudo...)
	for _, a := range added {
		stage(progress, "added %s", a)
	}
	if len(added) == 0 {
		stage(progress, "the image has user %s and sudo: nothing added", agentName)
	}
	return added, nil
}

// inRoot returns where p, a path inside the image, is on the host: symlinks resolved as they
// would be inside (an absolute one from rootfs), never outside rootfs.
func inRoot(rootfs, p string) string {
	j, err := securejoin.SecureJoin(rootfs, p)
	if err != nil {
		return rootfs + "/.unresolvable" // SecureJoin fails only on a symlink loop: nothing is there
	}
	return j
}

func executable(rootfs, p string) bool {
	fi, err := os.Stat(inRoot(rootfs, p))
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// ensureAgent adds user agent (uid 1000, its group, home and the /workspace mount point) unless
// /etc/passwd has a user by that name. A uid 1000 under another name stays: agent becomes a
// second name for it.
func ensureAgent(rootfs string, progress io.Writer) ([]string, error) {
	passwd := inRoot(rootfs, "/etc/passwd")
	users, err := readLines(passwd)
	if err != nil {
		return nil, err
	}
	for _, l := range users {
		f := strings.Split(l, ":")
		if f[0] == agentName {
			if len(f) > 2 && f[2] != fmt.Sprint(agentUID) {
				fmt.Fprintf(progress, "W: user %s has uid %s, not %d: the workspace belongs to uid %d\n", agentName, f[2], agentUID, agentUID)
			}
			return nil, nil
		}
	}
	shell := "/bin/sh"
	if executable(rootfs, "/bin/bash") {
		shell = "/bin/bash"
	}
	if err := os.MkdirAll(inRoot(rootfs, "/etc"), 0o755); err != nil {
		return nil, err
	}
	if err := appendLine(passwd, fmt.Sprintf("%s:x:%d:%d:%s:/home/%s:%s", agentName, agentUID, agentUID, agentName, agentName, shell), 0o644); err != nil {
		return nil, err
	}
	group := inRoot(rootfs, "/etc/group")
	groups, err := readLines(group)
	if err != nil {
		return nil, err
	}
	hasGID := false
	for _, l := range groups {
		if f := strings.Split(l, ":"); len(f) > 2 && f[2] == fmt.Sprint(agentUID) {
			hasGID = true
		}
	}
	if !hasGID {
		if err := appendLine(group, fmt.Sprintf("%s:x:%d:", agentName, agentUID), 0o644); err != nil {
			return nil, err
		}
	}
	// Without a shadow entry PAM (sudo's account check) may refuse the user.
	shadow := inRoot(rootfs, "/etc/shadow")
	if _, err := os.Stat(shadow); err == nil {
		if err := appendLine(shadow, agentName+":*:19000:0:99999:7:::", 0o640); err != nil {
			return nil, err
		}
	}
	for _, dir := range []string{"/home/" + agentName, "/workspace"} {
		p := inRoot(rootfs, dir)
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chown(p, agentUID, agentUID); err != nil {
			return nil, err
		}
	}
	return []string{fmt.Sprintf("user %s (uid %d, home /home/%s, shell %s)", agentName, agentUID, agentName, shell)}, nil
}

// sudoInstalls are the ways to install sudo, by the package manager the image has.
var sudoInstalls = []struct{ program, script string }{
	{"/usr/bin/apt-get", "apt-get update -qq && apt-get install -y -qq --no-install-recommends sudo && rm -rf /var/lib/apt/lists/*"},
	{"/sbin/apk", "apk add --no-cache sudo"},
	{"/usr/bin/dnf", "dnf install -y sudo && dnf clean all"},
	{"/usr/bin/microdnf", "microdnf install -y sudo && microdnf clean all"},
	{"/usr/bin/yum", "yum install -y sudo && yum clean all"},
}

// ensureSudo installs sudo with the image's package manager when it has none, through runner
// (sandboxd's runs it in a build sandbox, behind the egress gateway: the image's own programs
// never run as host root), then lets agent run anything as root.
func ensureSudo(ctx context.Context, name, rootfs string, runner StepRunner, progress io.Writer) ([]string, error) {
	var added []string
	if !hasSudo(rootfs) {
		installed := false
		for _, in := range sudoInstalls {
			if !executable(rootfs, in.program) || runner == nil {
				continue
			}
			stage(progress, "the image has no sudo: installing it with %s", in.program)
			if err := runSteps(ctx, runner, name, rootfs, nil, []string{in.script}, progress); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				fmt.Fprintf(progress, "W: %v\n", err)
				break
			}
			installed = hasSudo(rootfs)
			break
		}
		if !installed {
			stage(progress, "W: the image has no sudo and it could not be installed: %s cannot become root in it", agentName)
			return nil, nil
		}
		added = append(added, "sudo (installed with the image's package manager)")
	}
	rule := inRoot(rootfs, "/etc/sudoers.d/"+agentName)
	if _, err := os.Lstat(rule); err == nil {
		return added, nil
	}
	if err := os.MkdirAll(inRoot(rootfs, "/etc/sudoers.d"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(rule, []byte(sudoersRule), 0o440); err != nil {
		return nil, err
	}
	sudoers := inRoot(rootfs, "/etc/sudoers")
	b, err := os.ReadFile(sudoers)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if !bytes.Contains(b, []byte("includedir /etc/sudoers.d")) {
		if errors.Is(err, fs.ErrNotExist) {
			if err := appendLine(sudoers, "root ALL=(ALL:ALL) ALL", 0o440); err != nil {
				return nil, err
			}
		}
		if err := appendLine(sudoers, "@includedir /etc/sudoers.d", 0o440); err != nil {
			return nil, err
		}
	}
	return append(added, fmt.Sprintf("sudoers rule /etc/sudoers.d/%s: %s may run anything as root without a password", agentName, agentName)), nil
}

func hasSudo(rootfs string) bool {
	return executable(rootfs, "/usr/bin/sudo") || executable(rootfs, "/bin/sudo") || executable(rootfs, "/usr/sbin/sudo")
}

// readLines returns the non-empty lines of a file, none when it does not exist.
func readLines(p string) ([]string, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out, nil
}

// appendLine appends line to the file p, creating it with mode, after a newline if the file
// does not end in one.
func appendLine(p, line string, mode fs.FileMode) error {
	b, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		line = "\n" + line
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, mode)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
