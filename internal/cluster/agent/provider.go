package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	vkapi "github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	utilexec "k8s.io/utils/exec"

	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/internal/runtime"
	hapi "github.com/hiloop/hiloop/pkg/api"
	hv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// resyncInterval is how often every Pod's status is read again from its sandbox, for what no
// change notification says (a sandbox's init that died).
const resyncInterval = 30 * time.Second

// provider is virtual-kubelet's provider: each placement Pod bound to the node is one local
// sandbox, its Sandbox's metadata.name.
type provider struct {
	a    *Agent
	pods corev1listers.PodLister // the node's Pods, as virtual-kubelet's cache has them

	mu      sync.Mutex
	entries map[string]*podEntry // by namespace/name
	notify  func(*corev1.Pod)
	dirty   map[string]bool // sandbox keys changed since the loop last looked
	wake    chan struct{}
}

// podEntry is a Pod the node runs.
type podEntry struct {
	pod      *corev1.Pod // with the status last reported
	key      string      // its sandbox's key; "" when it names none
	fail     *failure    // why it could not run, once it could not
	started  time.Time
	deleting bool // DeletePod has it: a stop is not undone
}

func newProvider(a *Agent) *provider {
	p := &provider{a: a, entries: map[string]*podEntry{}, dirty: map[string]bool{}, wake: make(chan struct{}, 1)}
	a.cfg.Sandboxes.OnChange(func(key string) {
		p.mu.Lock()
		p.dirty[key] = true
		p.mu.Unlock()
		select {
		case p.wake <- struct{}{}:
		default:
		}
	})
	return p
}

func podKey(ns, name string) string { return ns + "/" + name }

// run reports the status of the Pods whose sandboxes changed, and of every Pod each
// resyncInterval, until ctx ends.
func (p *provider) run(ctx context.Context) {
	tick := time.NewTicker(resyncInterval)
	defer tick.Stop()
	for {
		all := false
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-tick.C:
			all = true
		}
		p.mu.Lock()
		dirty := p.dirty
		p.dirty = map[string]bool{}
		var todo []string
		for k, e := range p.entries {
			if all || dirty[e.key] {
				todo = append(todo, k)
			}
		}
		p.mu.Unlock()
		for _, k := range todo {
			p.refresh(ctx, k)
		}
	}
}

// refresh reads the sandbox of Pod k again and reports its status; a sandbox stopped under a
// Pod that is not being deleted is started again, as restartPolicy Always asks.
func (p *provider) refresh(ctx context.Context, k string) {
	p.mu.Lock()
	e, ok := p.entries[k]
	if !ok || e.fail != nil || e.key == "" {
		p.mu.Unlock()
		return
	}
	key, deleting := e.key, e.deleting
	p.mu.Unlock()
	sb, err := p.a.cfg.Sandboxes.Get(ctx, key)
	var local *hapi.Sandbox
	switch {
	case err == nil:
		local = &sb
	case !isCode(err, hapi.CodeSandboxNotFound):
		p.a.log.Warn("read a Pod's sandbox", "pod", k, "err", err)
		return
	}
	if local != nil && local.State == hapi.StateStopped && !deleting {
		go func() {
			if _, err := p.a.cfg.Sandboxes.Start(context.WithoutCancel(ctx), key); err != nil {
				p.a.log.Warn("start a sandbox stopped under its Pod", "pod", k, "err", err)
			}
		}()
	}
	p.report(k, local, nil)
}

// report sets Pod k's status from its sandbox (or fail) and tells virtual-kubelet.
func (p *provider) report(k string, sb *hapi.Sandbox, fail *failure) {
	p.mu.Lock()
	e, ok := p.entries[k]
	if !ok {
		p.mu.Unlock()
		return
	}
	if fail != nil {
		e.fail = fail
	}
	pod := e.pod.DeepCopy()
	pod.Status = podStatus(e.pod, sb, e.fail, p.a.cfg.NodeIP, e.started)
	e.pod = pod
	notify := p.notify
	p.mu.Unlock()
	if notify != nil {
		notify(pod.DeepCopy())
	}
}

// CreatePod runs pod's sandbox: it adopts the one this node has under the Sandbox's name
// (started again if it is stopped), or creates it for the Sandbox's owner from its spec.
func (p *provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	k := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	e, ok := p.entries[k]
	if !ok {
		e = &podEntry{pod: pod.DeepCopy(), started: time.Now()}
		p.entries[k] = e
	}
	p.mu.Unlock()
	sb, fail, err := p.runSandbox(ctx, pod)
	if err != nil {
		// virtual-kubelet tries again, with CreatePod as long as GetPod does not find it.
		if !ok {
			p.mu.Lock()
			delete(p.entries, k)
			p.mu.Unlock()
		}
		return err
	}
	p.mu.Lock()
	if sb != nil {
		e.key = sb.Name
	}
	p.mu.Unlock()
	if fail != nil {
		p.a.log.Warn("cannot run a Pod's sandbox", "pod", k, "reason", fail.reason, "message", fail.message)
	}
	p.report(k, sb, fail)
	return nil
}

// runSandbox makes pod's sandbox run. A failure that trying again cannot mend (a Sandbox that
// does not exist, an image that is not built, no room) is fail; any other is err.
func (p *provider) runSandbox(ctx context.Context, pod *corev1.Pod) (*hapi.Sandbox, *failure, error) {
	name := pod.Labels[hv1.LabelSandbox]
	if name == "" {
		return nil, &failure{ReasonNoSandbox, fmt.Sprintf("the Pod has no label %s naming its Sandbox", hv1.LabelSandbox)}, nil
	}
	res, err := p.a.sandboxes.get(pod.Namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, &failure{ReasonNoSandbox, fmt.Sprintf("Sandbox %s/%s not found", pod.Namespace, name)}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	owner, bare := identity.Split(res.Name)
	if res.Spec.Owner != owner || identity.Key(owner, bare) != res.Name {
		return nil, &failure{ReasonBadSandbox, fmt.Sprintf("Sandbox %s is not named for its owner %q: want %q", res.Name, res.Spec.Owner, identity.Key(res.Spec.Owner, bare))}, nil
	}
	sbs := p.a.cfg.Sandboxes
	sb, err := sbs.Get(ctx, res.Name)
	switch {
	case err == nil:
		if res.Status.ID != "" && res.Status.ID != sb.ID {
			return nil, &failure{ReasonBadSandbox, fmt.Sprintf("this node's sandbox %s is %s, not the Sandbox's %s", res.Name, sb.ID, res.Status.ID)}, nil
		}
		if sb.State == hapi.StateRunning {
			p.a.log.Info("adopted a running sandbox", "sandbox", res.Name, "id", sb.ID)
			return &sb, nil, nil
		}
		sb, err = sbs.Start(ctx, res.Name)
	case isCode(err, hapi.CodeSandboxNotFound):
		req, rerr := res.Spec.CreateRequest(bare)
		if rerr != nil {
			return nil, &failure{ReasonBadSandbox, rerr.Error()}, nil
		}
		req.NoStart = false // its Pod is there: it is to run
		sb, err = sbs.Create(ctx, owner, req)
		if err == nil {
			p.a.log.Info("created a sandbox", "sandbox", res.Name, "id", sb.ID)
		}
	}
	if err != nil {
		var apiErr *hapi.Error
		if errors.As(err, &apiErr) && apiErr.Code != hapi.CodeInvalidState && apiErr.Code != hapi.CodeInternal && apiErr.Code != hapi.CodeUnavailable {
			f := failureOf(err)
			return nil, &f, nil
		}
		return nil, nil, err
	}
	return &sb, nil, nil
}

// UpdatePod has nothing to do: what a Pod's update may change (labels, annotations, an image
// name) does not change its sandbox.
func (p *provider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.entries[podKey(pod.Namespace, pod.Name)]; ok {
		st := e.pod.Status
		e.pod = pod.DeepCopy()
		e.pod.Status = st
	}
	return nil
}

// DeletePod stops the Pod's sandbox; its workspace stays on this node for the next start.
func (p *provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	k := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	e, ok := p.entries[k]
	if !ok {
		p.mu.Unlock()
		return errdefs.NotFoundf("pod %s is not on this node", k)
	}
	e.deleting = true
	st := e.pod.Status
	e.pod = pod.DeepCopy()
	e.pod.Status = st
	key := e.key
	p.mu.Unlock()
	var local *hapi.Sandbox
	if key != "" {
		sb, err := p.a.cfg.Sandboxes.Stop(ctx, key)
		switch {
		case err == nil:
			local = &sb
			p.a.log.Info("stopped a sandbox whose Pod was deleted", "sandbox", key)
		case !isCode(err, hapi.CodeSandboxNotFound):
			return err
		}
	}
	p.report(k, local, nil)
	p.mu.Lock()
	delete(p.entries, k)
	p.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		// Stopped: the Pod can go now, as a kubelet lets a Pod go once its containers ended,
		// rather than at the end of its grace period (the Sandbox's next Pod waits for it).
		opts := metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: metav1.NewUIDPreconditions(string(pod.UID))}
		err := p.a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, opts)
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			p.a.log.Warn("delete a stopped Pod", "pod", k, "err", err)
		}
	}
	return nil
}

// GetPod is the Pod as the node runs it.
func (p *provider) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.entries[podKey(namespace, name)]
	if !ok {
		return nil, errdefs.NotFoundf("pod %s/%s is not on this node", namespace, name)
	}
	return e.pod.DeepCopy(), nil
}

// GetPodStatus is the Pod's status as last reported.
func (p *provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods is every Pod the node runs.
func (p *provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pods := make([]*corev1.Pod, 0, len(p.entries))
	for _, e := range p.entries {
		pods = append(pods, e.pod.DeepCopy())
	}
	return pods, nil
}

// NotifyPods takes the callback the statuses go to.
func (p *provider) NotifyPods(_ context.Context, cb func(*corev1.Pod)) {
	p.mu.Lock()
	p.notify = cb
	p.mu.Unlock()
}

// sandboxOf is the key of the sandbox Pod namespace/name runs, if it runs one.
func (p *provider) sandboxOf(namespace, name string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.entries[podKey(namespace, name)]
	if !ok || e.key == "" {
		return "", errdefs.NotFoundf("pod %s/%s runs no sandbox on this node", namespace, name)
	}
	return e.key, nil
}

// checkContainer refuses a container name that is not the placement Pod's one.
func checkContainer(name string) error {
	if name != "" && name != hv1.ContainerName {
		return errdefs.InvalidInputf("a placement Pod has one container, %q, not %q", hv1.ContainerName, name)
	}
	return nil
}

// RunInContainer runs cmd in the sandbox as its agent user (kubectl exec), with a terminal
// when one is asked for, and ends with the command's exit code.
func (p *provider) RunInContainer(ctx context.Context, namespace, podName, containerName string, cmd []string, attach vkapi.AttachIO) error {
	if err := checkContainer(containerName); err != nil {
		return err
	}
	key, err := p.sandboxOf(namespace, podName)
	if err != nil {
		return err
	}
	if len(cmd) == 0 {
		return errdefs.InvalidInput("no command to run")
	}
	spec := runtime.ExecSpec{Argv: cmd, User: hapi.DefaultExecUser, TTY: attach.TTY()}
	if spec.TTY {
		spec.Rows, spec.Cols = 24, 80
		spec.Env = []string{"TERM=xterm"}
	}
	proc, err := p.a.cfg.Sandboxes.Exec(ctx, key, spec)
	if err != nil {
		return err
	}
	var out sync.WaitGroup
	copyOut := func(w io.WriteCloser, r io.Reader) {
		if r == nil {
			return
		}
		if w == nil {
			w = nopCloser{io.Discard}
		}
		out.Go(func() {
			_, _ = io.Copy(w, r)
		})
	}
	copyOut(attach.Stdout(), proc.Stdout())
	copyOut(attach.Stderr(), proc.Stderr())
	if in := attach.Stdin(); in != nil {
		go func() {
			_, _ = io.Copy(proc.Stdin(), in)
			proc.Stdin().Close()
		}()
	} else {
		proc.Stdin().Close()
	}
	if spec.TTY && attach.Resize() != nil {
		go func() {
			for {
				select {
				case s, ok := <-attach.Resize():
					if !ok {
						return
					}
					_ = proc.Resize(s.Height, s.Width)
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	exited := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			// The client went away while the command ran. Once it has exited, what it left
			// running in the background (a server started with nohup) is not killed: Kill
			// ends the exec's whole session.
			select {
			case <-exited:
			default:
				_ = proc.Kill()
			}
		case <-exited:
		}
	}()
	status, err := proc.Wait()
	close(exited)
	out.Wait()
	if err != nil {
		return err
	}
	if code := status.ExitCode(); code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
	}
	return nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// AttachToContainer is refused: a sandbox has no main process whose streams one could join.
func (p *provider) AttachToContainer(ctx context.Context, namespace, podName, containerName string, attach vkapi.AttachIO) error {
	return errdefs.InvalidInput("a hiloop sandbox has no main process to attach to: use kubectl exec")
}

// PortForward joins stream to port on the sandbox's loopback (kubectl port-forward).
func (p *provider) PortForward(ctx context.Context, namespace, pod string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	key, err := p.sandboxOf(namespace, pod)
	if err != nil {
		return err
	}
	conn, err := p.a.cfg.Sandboxes.DialPort(ctx, key, int(port))
	if err != nil {
		return err
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(conn, stream)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(stream, conn)
		done <- struct{}{}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// GetContainerLogs is what the daemon records about the Pod's sandbox: its state, id, image,
// times and last error. A sandbox has no single output stream to show.
func (p *provider) GetContainerLogs(ctx context.Context, namespace, podName, containerName string, opts vkapi.ContainerLogOpts) (io.ReadCloser, error) {
	if err := checkContainer(containerName); err != nil {
		return nil, err
	}
	key, err := p.sandboxOf(namespace, podName)
	if err != nil {
		return nil, err
	}
	sb, err := p.a.cfg.Sandboxes.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(strings.NewReader(describe(sb))), nil
}

// describe is the lines kubectl logs shows of a sandbox.
func describe(sb hapi.Sandbox) string {
	var b strings.Builder
	stamp := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	fmt.Fprintf(&b, "%s sandbox %s (id %s) created from image %s\n", stamp(sb.CreatedAt), sb.Name, sb.ID, sb.Image)
	if sb.StartedAt != nil {
		fmt.Fprintf(&b, "%s started\n", stamp(*sb.StartedAt))
	}
	fmt.Fprintf(&b, "state %s\n", sb.State)
	if sb.Error != "" {
		fmt.Fprintf(&b, "error: %s\n", sb.Error)
	}
	if sb.OOMKills > 0 {
		fmt.Fprintf(&b, "processes killed for the memory limit since the start: %d\n", sb.OOMKills)
	}
	return b.String()
}

// GetStatsSummary reports the node alone: per-sandbox usage is the hiloop API's.
func (p *provider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: p.a.cfg.NodeName}}, nil
}

// GetMetricsResource reports no metrics.
func (p *provider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, nil
}

// stopOrphans stops every running sandbox of this node that belongs to a Sandbox placed here
// but has no Pod on the node: its Pod was deleted while the agent was not running. A sandbox
// no Sandbox names (made on this host alone) is left as it is.
func (p *provider) stopOrphans(ctx context.Context) error {
	list, err := p.a.cfg.Sandboxes.List(ctx)
	if err != nil {
		return err
	}
	for _, sb := range list {
		if sb.State != hapi.StateRunning {
			continue
		}
		res, ok := p.a.sandboxes.placedHere(sb.Name)
		if !ok {
			continue
		}
		if _, err := p.pods.Pods(res.Namespace).Get(res.Name); !apierrors.IsNotFound(err) {
			continue // it has its Pod, or the cache cannot say
		}
		p.mu.Lock()
		_, running := p.entries[podKey(res.Namespace, res.Name)]
		p.mu.Unlock()
		if running {
			continue
		}
		if _, err := p.a.cfg.Sandboxes.Stop(ctx, sb.Name); err != nil {
			p.a.log.Warn("stop a sandbox whose Pod went while the agent was away", "sandbox", sb.Name, "err", err)
			continue
		}
		p.a.log.Info("stopped a sandbox whose Pod went while the agent was away", "sandbox", sb.Name)
	}
	return nil
}
