package front

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hiloop/hiloop/internal/cluster/controller"
	"github.com/hiloop/hiloop/internal/identity"
	"github.com/hiloop/hiloop/pkg/api"
	hv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// AnnotationIdempotencyKey is on a Sandbox the front created for a request with an
// Idempotency-Key: a retry with the same key finds its sandbox there.
const AnnotationIdempotencyKey = "hiloop.dev/idempotency-key"

// How long a call waits for the controller and the node agent before it answers with the
// sandbox as it is then (a create or start still "creating", a delete still "deleting").
var (
	SettleWait = 2 * time.Minute
	DeleteWait = time.Minute
)

// UserNamespace is the Kubernetes namespace of owner's Sandboxes: their User's spec.namespace,
// or the default for a user with no User (the built-in admin before any credential).
func (f *Front) UserNamespace(ctx context.Context, owner string) string {
	var u hv1.User
	if err := f.c.Get(ctx, client.ObjectKey{Name: owner}, &u); err == nil && u.Spec.Namespace != "" {
		return u.Spec.Namespace
	}
	return f.opt.DefaultUserNamespace
}

// Create makes the Sandbox key (owner's key of req.Name, req normalised) in owner's namespace,
// at once its placement Pod (so that a ResourceQuota's refusal is answered now, and the
// Sandbox taken back), and waits until the sandbox runs (or is stopped, for NoStart), fails, or
// waits for a node the scheduler cannot find (answered as pending). With an idempotency key, a
// Sandbox made for the same key and request is answered again; another request's name taken
// is sandbox_exists.
func (f *Front) Create(ctx context.Context, owner, key string, req api.SandboxesPost, idemKey string) (api.Sandbox, error) {
	ns := f.UserNamespace(ctx, owner)
	sb := &hv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: key, Namespace: ns, Labels: map[string]string{hv1.LabelOwner: owner}},
		Spec:       hv1.SpecFromCreate(owner, req),
	}
	if idemKey != "" {
		sb.Annotations = map[string]string{AnnotationIdempotencyKey: idemKey}
	}
	err := f.c.Create(ctx, sb)
	if apierrors.IsAlreadyExists(err) {
		var old hv1.Sandbox
		if gerr := f.live.Get(ctx, client.ObjectKeyFromObject(sb), &old); gerr != nil {
			return api.Sandbox{}, storeErr(gerr)
		}
		switch {
		case idemKey == "" || old.Annotations[AnnotationIdempotencyKey] != idemKey || old.DeletionTimestamp != nil:
			return api.Sandbox{}, api.Errorf(api.CodeSandboxExists, "sandbox %q already exists", req.Name)
		case !sameCreate(old.Spec, sb.Spec):
			return api.Sandbox{}, api.Errorf(api.CodeIdempotencyKeyReused, "%s %q was used for another request", api.IdempotencyKeyHeader, idemKey)
		}
		return f.settle(ctx, &old, !req.NoStart)
	}
	if err != nil {
		return api.Sandbox{}, storeErr(err)
	}
	if !req.NoStart {
		if err := f.place(ctx, sb); err != nil {
			// Nothing half-made: the Sandbox the quota has no room for goes again.
			uid := sb.UID
			if derr := f.c.Delete(context.WithoutCancel(ctx), sb, client.Preconditions{UID: &uid}); derr != nil && !apierrors.IsNotFound(derr) {
				f.opt.Log.Error("delete a Sandbox whose Pod was refused", "sandbox", ns+"/"+key, "err", derr)
			} else {
				// Never placed, the controller releases it at once: the caller's next list
				// does not show it.
				f.waitGone(context.WithoutCancel(ctx), sb, 10*time.Second)
			}
			return api.Sandbox{}, err
		}
	}
	return f.settle(ctx, sb, !req.NoStart)
}

// sameCreate tells whether two specs were made from the same create request; spec.stopped is
// left out, which a start or stop since has changed.
func sameCreate(a, b hv1.SandboxSpec) bool {
	a.Stopped, b.Stopped = false, false
	return equality.Semantic.DeepEqual(a, b)
}

// place makes sb's placement Pod, as the controller would: a ResourceQuota's refusal is
// quota_exceeded, naming the quota; the Pod there already (the controller was first) is fine;
// another failure is the controller's to retry, and only logged.
func (f *Front) place(ctx context.Context, sb *hv1.Sandbox) error {
	err := f.c.Create(ctx, controller.PodFor(sb))
	if quota, msg, ok := controller.QuotaError(err); ok {
		return api.Errorf(api.CodeQuotaExceeded, "sandbox %q does not fit the ResourceQuota %q of namespace %s: %s", bareName(sb.Name), quota, sb.Namespace, msg)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		f.opt.Log.Warn("make a placement Pod (the controller tries again)", "sandbox", sb.Namespace+"/"+sb.Name, "err", err)
	}
	return nil
}

// Get is the sandbox key of owner, from the cache.
func (f *Front) Get(ctx context.Context, owner, key string) (*hv1.Sandbox, error) {
	var sb hv1.Sandbox
	err := f.c.Get(ctx, client.ObjectKey{Namespace: f.UserNamespace(ctx, owner), Name: key}, &sb)
	if apierrors.IsNotFound(err) || err == nil && sb.Spec.Owner != owner {
		return nil, api.Errorf(api.CodeSandboxNotFound, "sandbox %q not found", bareName(key))
	}
	if err != nil {
		return nil, storeErr(err)
	}
	return &sb, nil
}

// List is every Sandbox of owner, or of every user for owner "", from the cache, by key.
func (f *Front) List(ctx context.Context, owner string) ([]hv1.Sandbox, error) {
	var list hv1.SandboxList
	if err := f.c.List(ctx, &list); err != nil {
		return nil, storeErr(err)
	}
	out := list.Items[:0]
	for _, sb := range list.Items {
		o, _ := identity.Split(sb.Name)
		if o != sb.Spec.Owner || owner != "" && o != owner {
			continue // not made by a front: no hiloop user's key
		}
		out = append(out, sb)
	}
	slices.SortFunc(out, func(a, b hv1.Sandbox) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// SetStopped sets the wanted state of owner's sandbox key and waits until it is reached (or
// fails, or waits for a node); a start the quota has no room for is quota_exceeded, and the
// sandbox stays stopped.
func (f *Front) SetStopped(ctx context.Context, owner, key string, stopped bool) (api.Sandbox, error) {
	sb, err := f.Get(ctx, owner, key)
	if err != nil {
		return api.Sandbox{}, err
	}
	if sb.DeletionTimestamp != nil {
		return api.Sandbox{}, api.Errorf(api.CodeInvalidState, "sandbox %q is being deleted", bareName(key))
	}
	if sb.Spec.Stopped != stopped {
		patch := client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"spec":{"stopped":%t}}`, stopped))
		if err := f.c.Patch(ctx, sb, patch); err != nil {
			return api.Sandbox{}, storeErr(err)
		}
		if !stopped {
			if err := f.place(ctx, sb); err != nil {
				undo := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"stopped":true}}`))
				if uerr := f.c.Patch(context.WithoutCancel(ctx), sb, undo); uerr != nil {
					f.opt.Log.Error("stop again a Sandbox whose Pod was refused", "sandbox", sb.Namespace+"/"+key, "err", uerr)
				}
				return api.Sandbox{}, err
			}
		}
	}
	return f.settle(ctx, sb, !stopped)
}

// Delete deletes owner's sandbox key and waits, at most DeleteWait, until it is gone: its node
// agent deletes the workspace first. It returns the sandbox still deleting when it is not gone
// by then, and nil when it is.
func (f *Front) Delete(ctx context.Context, owner, key string) (*api.Sandbox, error) {
	sb, err := f.Get(ctx, owner, key)
	if err != nil {
		return nil, err
	}
	uid := sb.UID
	if err := f.c.Delete(ctx, sb, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return nil, storeErr(err)
	}
	return f.waitGone(ctx, sb, DeleteWait), nil
}

// waitGone waits, at most limit, until the cache no longer holds sb (deleted: a later list
// does not show it); it returns the sandbox as it is when it is still there.
func (f *Front) waitGone(ctx context.Context, sb *hv1.Sandbox, limit time.Duration) *api.Sandbox {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		changed := f.changes()
		var now hv1.Sandbox
		err := f.c.Get(ctx, client.ObjectKeyFromObject(sb), &now)
		if apierrors.IsNotFound(err) || err == nil && now.UID != sb.UID {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			out := Present(&now)
			return &out
		}
	}
}

// settle waits until sb (as written: its generation) has a status for that generation that is
// an answer: running (or stopped, when not running is wanted), failed, pending for want of a
// node, or unavailable. It answers with the sandbox as it is after SettleWait, whatever it is.
func (f *Front) settle(ctx context.Context, sb *hv1.Sandbox, running bool) (api.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, SettleWait)
	defer cancel()
	key := client.ObjectKeyFromObject(sb)
	uid := sb.UID
	last := sb
	for {
		changed := f.changes()
		var now hv1.Sandbox
		err := f.c.Get(ctx, key, &now)
		switch {
		case apierrors.IsNotFound(err):
			// The cache may not have seen the create yet; the API server says whether it went.
			if lerr := f.live.Get(ctx, key, &now); apierrors.IsNotFound(lerr) {
				return api.Sandbox{}, api.Errorf(api.CodeSandboxNotFound, "sandbox %q was deleted meanwhile", bareName(key.Name))
			}
		case err != nil:
			return api.Sandbox{}, storeErr(err)
		case now.UID != uid:
			return api.Sandbox{}, api.Errorf(api.CodeSandboxNotFound, "sandbox %q was deleted meanwhile", bareName(key.Name))
		default:
			last = &now
			if done, err := settled(&now, sb.Generation, running); done || err != nil {
				return Present(&now), err
			}
		}
		select {
		case <-changed:
		case <-time.After(time.Second): // the live read above is not watched
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return Present(last), nil
			}
			return api.Sandbox{}, ctx.Err()
		}
	}
}

// settled tells whether sb's status answers a call that wrote generation and wants the sandbox
// running or not: an error for one that failed or that a quota holds back.
func settled(sb *hv1.Sandbox, generation int64, running bool) (bool, error) {
	st := sb.Status
	if st.ObservedGeneration < generation {
		return false, nil
	}
	switch st.State {
	case hv1.StateRunning:
		return running, nil
	case hv1.StateStopped:
		return !running, nil
	case hv1.StateFailed:
		return true, failure(sb)
	case hv1.StateUnavailable:
		return true, nil
	case hv1.StatePending:
		switch st.Reason {
		case controller.ReasonUnschedulable:
			return true, nil
		case controller.ReasonQuotaExceeded:
			return true, api.Errorf(api.CodeQuotaExceeded, "sandbox %q waits for room in a ResourceQuota of namespace %s: %s", bareName(sb.Name), sb.Namespace, st.Message)
		}
	case hv1.StateDeleting:
		return true, api.Errorf(api.CodeInvalidState, "sandbox %q is being deleted", bareName(sb.Name))
	}
	return false, nil
}

// failure is the error of a failed sandbox: the hiloop error its node agent reported (its
// reason is the code in CamelCase), or invalid_state with the agent's words.
func failure(sb *hv1.Sandbox) error {
	st := sb.Status
	if code := codeOf(st.Reason); code != "" {
		return api.Errorf(code, "sandbox %q failed on node %s: %s", bareName(sb.Name), st.Node, st.Message)
	}
	return api.Errorf(api.CodeInvalidState, "sandbox %q failed on node %s: %s: %s", bareName(sb.Name), st.Node, st.Reason, st.Message)
}

// codeOf is the hiloop error code whose CamelCase form is reason ("ImageNotFound" is
// image_not_found), or "" when no code is.
func codeOf(reason string) api.ErrorCode {
	var b strings.Builder
	for i, r := range reason {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	code := api.ErrorCode(b.String())
	if code == "" || code.HTTPStatus() == http.StatusInternalServerError {
		return ""
	}
	return code
}

// Present is sb as the hiloop API shows it to its owner: the bare name, the owner, and the
// cluster's state.
func Present(sb *hv1.Sandbox) api.Sandbox {
	owner, name := identity.Split(sb.Name)
	out := api.Sandbox{
		Name:             name,
		Owner:            owner,
		ID:               sb.Status.ID,
		Image:            sb.Spec.Image,
		State:            api.SandboxState(sb.Status.State),
		CPUs:             api.DefaultCPUs,
		MemoryMB:         api.DefaultMemoryMB,
		PermissionPolicy: api.PermissionPolicy(sb.Spec.PermissionPolicy),
		CreatedAt:        sb.CreationTimestamp.UTC(),
		Node:             sb.Status.Node,
		Workspace: api.Workspace{
			StorageClass:  api.StorageClass(sb.Spec.StorageClass),
			CapacityBytes: int64(api.DefaultWorkspaceGiB) << 30,
		},
		Rootfs: api.Rootfs{CapacityBytes: int64(api.DefaultRootfsGiB) << 30},
	}
	if out.Image == "" {
		out.Image = api.DefaultImage
	}
	if out.State == "" {
		out.State = api.StatePending
	}
	if out.Workspace.StorageClass == "" {
		out.Workspace.StorageClass = api.StorageDurable
	}
	if out.PermissionPolicy == "" {
		out.PermissionPolicy = api.PolicyAutoApprove
	}
	if q := sb.Spec.CPUs; q != nil {
		out.CPUs = float64(q.MilliValue()) / 1000
	}
	if q := sb.Spec.Memory; q != nil {
		out.MemoryMB = int(q.Value() >> 20)
	}
	if q := sb.Spec.Workspace; q != nil {
		out.Workspace.CapacityBytes = q.Value()
	}
	if q := sb.Spec.Rootfs; q != nil {
		out.Rootfs.CapacityBytes = q.Value()
	}
	if e := sb.Spec.Egress; e != nil {
		out.Egress = api.Egress{Mode: api.EgressMode(e.Mode), Allow: e.Allow, Deny: e.Deny}
	}
	for _, s := range sb.Spec.Secrets {
		out.Secrets = append(out.Secrets, api.SecretAttachment{Secret: s.Secret, Env: s.Env})
	}
	if t := sb.Status.StartedAt; t != nil && out.State == api.StateRunning {
		at := t.UTC()
		out.StartedAt = &at
	}
	switch out.State {
	case api.StateFailed:
		out.Error = strings.TrimPrefix(sb.Status.Reason+": "+sb.Status.Message, ": ")
	case api.StatePending, api.StateUnavailable, api.StateDeleting:
		out.Message = sb.Status.Message
	}
	return out
}

// bareName is the name a key shows its owner.
func bareName(key string) string {
	_, name := identity.Split(key)
	return name
}

// storeErr is an API server's failure as the hiloop API says it.
func storeErr(err error) error {
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		return err
	}
	if apierrors.IsForbidden(err) {
		return api.Errorf(api.CodeForbidden, "the cluster refused the front: %v", err)
	}
	return api.Errorf(api.CodeUnavailable, "the cluster's API server: %v", err)
}
