package daemon

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/hiloop/hiloop/images"
	"github.com/hiloop/hiloop/internal/gateway"
	"github.com/hiloop/hiloop/internal/lockedwriter"
	"github.com/hiloop/hiloop/internal/runtime"
	"github.com/hiloop/hiloop/internal/sandbox"
	"github.com/hiloop/hiloop/pkg/api"
)

// buildRunner is sandboxd's images.StepRunner: a derived image's steps run in a build sandbox
// (sandbox.Manager.StartBuild), never on the host. A step is an API user's code: as root in a
// chroot it would be host root, and the host's network would bypass the gateway and its audit.
type buildRunner struct{ m *sandbox.Manager }

func (r buildRunner) Start(ctx context.Context, name, rootfs string, progress io.Writer) (images.StepSession, error) {
	if s, ok := progress.(images.Stager); ok {
		s.Stage("starting the build sandbox")
	}
	b, err := r.m.StartBuild(ctx, name, rootfs)
	if err != nil {
		return nil, err
	}
	return buildSession{b}, nil
}

type buildSession struct{ b *sandbox.Build }

func (s buildSession) Run(ctx context.Context, script string, env []string, out io.Writer) (int, error) {
	// User empty: root.
	p, err := s.b.Exec(ctx, runtime.ExecSpec{Argv: []string{"/bin/sh", "-ec", script}, Env: env, Dir: "/"})
	if err != nil {
		return 0, err
	}
	_ = p.Stdin().Close()
	stop := context.AfterFunc(ctx, func() { _ = p.Kill() })
	defer stop()
	// stdout and stderr arrive concurrently; out takes one write at a time.
	w := lockedwriter.New(out)
	var wg sync.WaitGroup
	for _, r := range []io.Reader{p.Stdout(), p.Stderr()} {
		wg.Go(func() { _, _ = io.Copy(w, r) })
	}
	st, err := p.Wait()
	wg.Wait()
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if err != nil {
		return 0, err
	}
	return st.ExitCode(), nil
}

func (s buildSession) Close(ctx context.Context) error { return s.b.Close(ctx) }

// buildEgressAudit puts the gateway's decisions about a build sandbox's traffic in the
// daemon's audit log (`hiloop audit`): a build sandbox has no name to ask its egress log by
// and is gone with its build, and what a build step fetched is the operator's business. A
// DNS answer given is left out (the connection that follows is recorded); a refused one is not.
func (d *Daemon) buildEgressAudit(r gateway.Record) {
	if r.Kind == gateway.KindDNS && r.Allowed {
		return
	}
	d.auditAdd(api.AuditRecord{Time: r.Time.UTC(), Action: api.AuditImageBuildEgress, Sandbox: r.Sandbox, Message: buildEgressMessage(r)})
}

// buildEgressMessage is one decision in a line: kind, destination, verdict, bytes or reason.
func buildEgressMessage(r gateway.Record) string {
	dst := r.Host
	if dst == "" && r.Addr.IsValid() {
		dst = r.Addr.String()
	} else if r.Port != 0 {
		dst = fmt.Sprintf("%s:%d", dst, r.Port)
	}
	if r.Kind == gateway.KindDNS {
		dst += " " + r.QueryType
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Kind, dst)
	if r.Allowed {
		fmt.Fprintf(&b, " allowed, %d bytes up, %d down", r.BytesUp, r.BytesDown)
	} else {
		b.WriteString(" denied")
	}
	for _, why := range []string{r.Rule, r.Err} {
		if why != "" {
			b.WriteString(": " + why)
		}
	}
	return b.String()
}

var _ images.StepRunner = buildRunner{}
