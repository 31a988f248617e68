package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/pkg/api"
)

// A build sandbox runs the steps of an image build (images.Derive): a transient sandbox with
// no record and no workspace, whose root filesystem is the copy of the parent image the build
// makes, writable (runtime.Spec.WritableImage). It runs in a user namespace of its own like
// any sandbox, so root inside is no host root, and its network goes through the egress gateway
// (open policy, no secrets). It is not listed among the sandboxes: it lives only as long as its
// build, and what a crash leaves of it (its container, cgroup and layer directory, whose id no
// record knows) goes at the next Reconcile.

// BuildIDPrefix starts the id of every build sandbox, which no recorded sandbox's id (hex)
// does: the gateway's audit records of a build are told apart by it.
const BuildIDPrefix = "build-"

// Limits of a build sandbox: a sandbox's defaults, which fit apt-get and npm install.
const (
	BuildCPUs     = api.DefaultCPUs
	BuildMemoryMB = api.DefaultMemoryMB
)

// Build is a running build sandbox.
type Build struct {
	m *Manager
	// ID is its container id (BuildIDPrefix and hex); Name is what the gateway calls it.
	ID, Name string
	base     uint32
	layerDir string
}

// StartBuild starts a build sandbox for image name on the root filesystem rootfs, which its
// steps change. Close it, whatever happens.
func (m *Manager) StartBuild(ctx context.Context, name, rootfs string) (_ *Build, retErr error) {
	b := &Build{m: m, ID: BuildIDPrefix + newID(), Name: BuildIDPrefix + name}
	b.layerDir = filepath.Join(m.layerDir, b.ID)
	var err error
	if b.base, err = m.reserveIDBase(); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, b.Close(context.WithoutCancel(ctx)))
		}
	}()
	spec := runtime.Spec{
		ID:            b.ID,
		Hostname:      buildHostname(name),
		ImageDir:      rootfs,
		WritableImage: true,
		LayerDir:      b.layerDir,
		IDBase:        b.base,
		CPUs:          BuildCPUs,
		MemoryMB:      BuildMemoryMB,
	}
	// No CA: a build has no secrets, so the gateway carries its TLS byte for byte, and a CA
	// written into the image would stay in it.
	if m.egress != nil {
		spec.Nameserver = m.egress.Nameserver()
		spec.Network = func(ctx context.Context) error {
			if err := m.egress.Attach(ctx, b.ID, b.Name, api.Egress{Mode: api.EgressOpen}); err != nil {
				return fmt.Errorf("egress: %w", err)
			}
			return nil
		}
	}
	if err := m.runtime.Start(ctx, spec); err != nil {
		return nil, fmt.Errorf("start the build sandbox: %w", err)
	}
	m.log.Info("build sandbox started", "image", name, "id", b.ID)
	return b, nil
}

// buildHostname is a build sandbox's hostname: build-NAME, within a hostname's 63 bytes.
func buildHostname(name string) string {
	h := BuildIDPrefix + name
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

// Exec runs a process in the build sandbox with the gateway's environment (the proxy
// variables) under spec.Env.
func (b *Build) Exec(ctx context.Context, spec runtime.ExecSpec) (runtime.Process, error) {
	if b.m.egress != nil {
		spec.Env = append(b.m.egress.Env(b.ID), spec.Env...)
	}
	return b.m.runtime.Exec(ctx, b.ID, spec)
}

// Close stops the build sandbox and removes everything of it: egress, processes, container,
// cgroup, mounts and layer directory. Its root filesystem, the caller's, stays.
func (b *Build) Close(ctx context.Context) error {
	b.m.detach(b.ID)
	err := b.m.runtime.Stop(ctx, b.ID, 0)
	if err == nil {
		err = b.m.runtime.RemoveLayer(b.layerDir)
	}
	if err == nil {
		// Only once nothing runs in it can another sandbox get the range.
		b.m.releaseIDBase(b.base)
	}
	if err != nil {
		return fmt.Errorf("remove the build sandbox %s: %w", b.ID, err)
	}
	return nil
}
