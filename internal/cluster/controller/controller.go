package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// Name is the controller's name: in its logs, metrics and the events it records
// (reportingController).
const Name = "hiloop-controller"

// LeaseName is the Lease (coordination.k8s.io) the front replicas elect the active controller
// with, in the namespace passed to ManagerOptions (the front's own).
const LeaseName = "hiloop-controller"

// IndexNode is the field index on Sandboxes by status.node that Add registers with the
// manager's cache: client.MatchingFields{IndexNode: "agent-1"} lists the Sandboxes on a node.
const IndexNode = "status.node"

// DefaultQuotaRetry is how long a Sandbox whose Pod a ResourceQuota refused waits before the
// controller tries again when no ResourceQuota of its namespace has changed meanwhile.
const DefaultQuotaRetry = 30 * time.Second

// Options tunes the controller. The zero value is the production setting.
type Options struct {
	// QuotaRetry overrides DefaultQuotaRetry.
	QuotaRetry time.Duration

	// For tests: called at every reconcile of an existing Sandbox, and lift the process-wide
	// uniqueness of controller names so several managers run in one test binary.
	onReconcile        func(types.NamespacedName)
	skipNameValidation bool
}

// Scheme is the scheme the controller's manager needs: Kubernetes' built-in types and
// hiloop.dev/v1alpha1.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// ManagerOptions is the manager the front runs the controller in: the Scheme, leader election
// through the Lease LeaseName in leaseNamespace (released at once on a clean stop, so another
// replica takes over within its retry period rather than the lease's duration), caches holding
// only placement Pods (label hiloop.dev/sandbox) and agent Nodes (hiloop.dev/agent=true), and
// no metrics or health listener (the front serves its own).
func ManagerOptions(leaseNamespace string) (manager.Options, error) {
	s, err := Scheme()
	if err != nil {
		return manager.Options{}, err
	}
	placement, err := labels.NewRequirement(v1alpha1.LabelSandbox, selection.Exists, nil)
	if err != nil {
		return manager.Options{}, err
	}
	agent, err := labels.NewRequirement(v1alpha1.LabelAgent, selection.Equals, []string{"true"})
	if err != nil {
		return manager.Options{}, err
	}
	return manager.Options{
		Scheme:                        s,
		LeaderElection:                true,
		LeaderElectionResourceLock:    "leases",
		LeaderElectionID:              LeaseName,
		LeaderElectionNamespace:       leaseNamespace,
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       server.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:  {Label: labels.NewSelector().Add(*placement)},
			&corev1.Node{}: {Label: labels.NewSelector().Add(*agent)},
		}},
	}, nil
}

// Add registers the Sandbox controller with mgr: it reconciles Sandboxes, their Pods, the agent
// Nodes they are on (through the IndexNode field index) and the ResourceQuotas of namespaces
// where a Sandbox waits for quota. It runs only while mgr holds the leader election.
func Add(mgr manager.Manager, opts Options) error {
	if opts.QuotaRetry <= 0 {
		opts.QuotaRetry = DefaultQuotaRetry
	}
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.Sandbox{}, IndexNode, func(o client.Object) []string {
		if n := o.(*v1alpha1.Sandbox).Status.Node; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index sandboxes by %s: %w", IndexNode, err)
	}
	r := &reconciler{
		client: mgr.GetClient(),
		live:   mgr.GetAPIReader(),
		events: mgr.GetEventRecorder(Name),
		opts:   opts,
	}
	copts := crcontroller.Options{}
	if opts.skipNameValidation {
		copts.SkipNameValidation = ptr.To(true)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		WithOptions(copts).
		For(&v1alpha1.Sandbox{}).
		Owns(&corev1.Pod{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.sandboxesOnNode),
			builder.WithPredicates(agentNodeReadiness())).
		Watches(&corev1.ResourceQuota{}, handler.EnqueueRequestsFromMapFunc(r.sandboxesWaitingForQuota)).
		Complete(r)
}

// agentNodeReadiness passes the events of agent Nodes that can change a Sandbox's status: the
// node appearing, going, or its Ready condition changing (not its periodic status updates).
func agentNodeReadiness() predicate.Predicate {
	agent := func(o client.Object) bool { return o.GetLabels()[v1alpha1.LabelAgent] == "true" }
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return agent(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return agent(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return agent(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			if !agent(e.ObjectOld) && !agent(e.ObjectNew) {
				return false
			}
			o, n := readyCondition(e.ObjectOld.(*corev1.Node)), readyCondition(e.ObjectNew.(*corev1.Node))
			if o == nil || n == nil {
				return o != n
			}
			return o.Status != n.Status || o.Reason != n.Reason || o.Message != n.Message ||
				!o.LastTransitionTime.Equal(&n.LastTransitionTime)
		},
	}
}

type reconciler struct {
	client client.Client
	live   client.Reader // the API server itself, for what the cache may not have seen yet
	events recorder.EventRecorder
	opts   Options
}

func (r *reconciler) sandboxesOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.SandboxList
	if err := r.client.List(ctx, &list, client.MatchingFields{IndexNode: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "list sandboxes on node", "node", o.GetName())
		return nil
	}
	return requests(list.Items, func(*v1alpha1.Sandbox) bool { return true })
}

func (r *reconciler) sandboxesWaitingForQuota(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.SandboxList
	if err := r.client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "list sandboxes waiting for quota", "namespace", o.GetNamespace())
		return nil
	}
	return requests(list.Items, func(sb *v1alpha1.Sandbox) bool { return sb.Status.Reason == ReasonQuotaExceeded })
}

func requests(items []v1alpha1.Sandbox, keep func(*v1alpha1.Sandbox) bool) []reconcile.Request {
	var out []reconcile.Request
	for i := range items {
		if keep(&items[i]) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&items[i])})
		}
	}
	return out
}

// Reconcile brings one Sandbox's Pod, finalizer and status in line with its spec and the
// cluster. Every write is conditional on what it read (UID and resourceVersion preconditions,
// optimistic locks), so a stale cache costs a retry, never a wrong write.
func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	lg := log.FromContext(ctx)
	sb := &v1alpha1.Sandbox{}
	if err := r.client.Get(ctx, req.NamespacedName, sb); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if r.opts.onReconcile != nil {
		r.opts.onReconcile(req.NamespacedName)
	}

	var o observed
	pod, err := r.ownPod(ctx, sb, &o)
	if err != nil {
		return reconcile.Result{}, err
	}
	node := nodeOf(sb, pod)
	if node != "" {
		if o.node, o.nodeMissing, err = r.node(ctx, node); err != nil {
			return reconcile.Result{}, err
		}
	}

	if !sb.DeletionTimestamp.IsZero() {
		if node == "" && controllerutil.ContainsFinalizer(sb, v1alpha1.FinalizerWorkspace) {
			// About to release it as never placed: ask the API server, not the cache, whether
			// its Pod was bound meanwhile.
			if pod, err = r.livePod(ctx, sb, &o); err != nil {
				return reconcile.Result{}, err
			}
			if node = nodeOf(sb, pod); node != "" {
				if o.node, o.nodeMissing, err = r.node(ctx, node); err != nil {
					return reconcile.Result{}, err
				}
			}
		}
		done, err := r.finish(ctx, sb, pod, node, o.nodeMissing)
		if err != nil || done {
			return reconcile.Result{}, err
		}
		o.pod = pod
		return reconcile.Result{}, r.writeStatus(ctx, sb, statusFor(sb, o))
	}

	if !controllerutil.ContainsFinalizer(sb, v1alpha1.FinalizerWorkspace) {
		orig := sb.DeepCopy()
		controllerutil.AddFinalizer(sb, v1alpha1.FinalizerWorkspace)
		if err := r.client.Patch(ctx, sb, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}

	var result reconcile.Result
	switch {
	case o.conflict != "":
		// Someone else's Pod has the name: nothing of ours to do until it goes.
	case sb.Spec.Stopped:
		if pod != nil && pod.DeletionTimestamp.IsZero() {
			// Unbound, it must still be unbound when deleted: a binding meanwhile means a node
			// agent may be making the workspace, and the node must be recorded first.
			if err := r.deletePod(ctx, pod, pod.Spec.NodeName == ""); err != nil {
				return reconcile.Result{}, err
			}
			lg.Info("stopping: deleted the placement pod", "node", pod.Spec.NodeName)
			r.events.Eventf(sb, pod, corev1.EventTypeNormal, "Stopping", "DeletePod", "deleted Pod %s to stop the sandbox", pod.Name)
		}
	case pod == nil:
		created, err := r.createPod(ctx, sb, &o)
		if err != nil {
			return reconcile.Result{}, err
		}
		pod = created
		if o.quota != "" {
			result.RequeueAfter = r.opts.QuotaRetry
		}
	case pod.Spec.NodeName == "" && pod.DeletionTimestamp.IsZero() && placementDiffers(pod, PodFor(sb)):
		// An unbound Pod asks for what the Sandbox no longer wants (a smaller size, another
		// selector): replace it. A bound Pod is never replaced; the next start uses the new spec.
		if err := r.deletePod(ctx, pod, true); err != nil {
			return reconcile.Result{}, err
		}
		lg.Info("replacing an unbound pod made for an older spec")
	}
	o.pod = pod
	return result, r.writeStatus(ctx, sb, statusFor(sb, o))
}

// ownPod is sb's Pod, nil when it has none. A Pod of an earlier Sandbox of the same name is
// deleted (the garbage collector would, in its time); a Pod no Sandbox owns is left alone and
// noted in o.conflict.
func (r *reconciler) ownPod(ctx context.Context, sb *v1alpha1.Sandbox, o *observed) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := r.client.Get(ctx, client.ObjectKeyFromObject(sb), pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return r.classify(ctx, sb, pod, o)
}

// livePod is ownPod read from the API server.
func (r *reconciler) livePod(ctx context.Context, sb *v1alpha1.Sandbox, o *observed) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := r.live.Get(ctx, client.ObjectKeyFromObject(sb), pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return r.classify(ctx, sb, pod, o)
}

func (r *reconciler) classify(ctx context.Context, sb *v1alpha1.Sandbox, pod *corev1.Pod, o *observed) (*corev1.Pod, error) {
	owner := metav1.GetControllerOf(pod)
	switch {
	case owner != nil && owner.UID == sb.UID:
		return pod, nil
	case owner != nil && owner.Kind == "Sandbox" && owner.APIVersion == v1alpha1.SchemeGroupVersion.String():
		if pod.DeletionTimestamp.IsZero() {
			if err := r.deletePod(ctx, pod, false); err != nil {
				return nil, err
			}
		}
		return nil, nil // not a conflict: it is going, and the Sandbox waits for it as pending
	default:
		o.conflict = fmt.Sprintf("Pod %s/%s is in the way: the Sandbox does not own it", pod.Namespace, pod.Name)
		return nil, nil
	}
}

// node is the Node named name from the cache; missing is true only when the API server itself
// says there is none (a cache that has not seen a new Node yet must not lose a workspace).
func (r *reconciler) node(ctx context.Context, name string) (node *corev1.Node, missing bool, err error) {
	node = &corev1.Node{}
	err = r.client.Get(ctx, types.NamespacedName{Name: name}, node)
	if err == nil {
		return node, false, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, false, err
	}
	err = r.live.Get(ctx, types.NamespacedName{Name: name}, node)
	switch {
	case err == nil:
		return node, false, nil
	case apierrors.IsNotFound(err):
		return nil, true, nil
	default:
		return nil, false, err
	}
}

// createPod creates sb's Pod and returns it. A quota's refusal is no error: it is noted in
// o.quota. AlreadyExists is no error either (the front makes the Pod at once on a create): the
// Pod there is read from the API server and classified.
func (r *reconciler) createPod(ctx context.Context, sb *v1alpha1.Sandbox, o *observed) (*corev1.Pod, error) {
	pod := PodFor(sb)
	err := r.client.Create(ctx, pod)
	if err == nil {
		log.FromContext(ctx).Info("created the placement pod", "node", sb.Status.Node)
		return pod, nil
	}
	if quota, msg, ok := QuotaError(err); ok {
		if sb.Status.Reason != ReasonQuotaExceeded || sb.Status.Message != msg {
			r.events.Eventf(sb, nil, corev1.EventTypeWarning, ReasonQuotaExceeded, "CreatePod", "%s", msg)
		}
		log.FromContext(ctx).Info("quota refused the placement pod", "quota", quota)
		o.quota = msg
		return nil, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create pod: %w", err)
	}
	existing := &corev1.Pod{}
	if err := r.live.Get(ctx, client.ObjectKeyFromObject(pod), existing); err != nil {
		return nil, client.IgnoreNotFound(err) // gone again: the next event retries
	}
	return r.classify(ctx, sb, existing, o)
}

// deletePod deletes pod if it is still the one read (UID), and, with unbound, only if it has not
// changed since (resourceVersion): an unbound Pod the scheduler binds meanwhile must be seen
// bound, so its node is recorded before anything else is decided.
func (r *reconciler) deletePod(ctx context.Context, pod *corev1.Pod, unbound bool) error {
	pre := metav1.Preconditions{UID: &pod.UID}
	if unbound {
		pre.ResourceVersion = &pod.ResourceVersion
	}
	err := r.client.Delete(ctx, pod, &client.DeleteOptions{Preconditions: &pre})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod: %w", err)
	}
	return nil
}

// finish handles a deleted Sandbox; done says the Sandbox is released (its status is moot). One
// never placed is released once its unbound Pod is gone; one placed is its node agent's to
// release, after it deletes the workspace, unless its node is gone from the cluster.
func (r *reconciler) finish(ctx context.Context, sb *v1alpha1.Sandbox, pod *corev1.Pod, node string, nodeMissing bool) (done bool, err error) {
	lg := log.FromContext(ctx)
	if !controllerutil.ContainsFinalizer(sb, v1alpha1.FinalizerWorkspace) {
		return false, nil
	}
	if pod != nil && pod.DeletionTimestamp.IsZero() {
		// Deleting the Pod stops a placed sandbox and frees its node's and quota's share at once.
		if err := r.deletePod(ctx, pod, node == ""); err != nil {
			return false, err
		}
	}
	switch {
	case node == "":
		lg.Info("releasing a deleted sandbox that was never placed")
	case nodeMissing:
		lg.Info("releasing a deleted sandbox whose node is gone: no agent is left to delete its workspace", "node", node)
		r.events.Eventf(sb, nil, corev1.EventTypeWarning, ReasonNodeNotFound, "RemoveFinalizer",
			"node %s is no longer in the cluster: released without deleting the workspace it held", node)
	default:
		return false, nil // the node agent's: it deletes the workspace, then the finalizer
	}
	orig := sb.DeepCopy()
	controllerutil.RemoveFinalizer(sb, v1alpha1.FinalizerWorkspace)
	if err := r.client.Patch(ctx, sb, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return true, nil
}

// writeStatus writes st when it differs from what sb has: a quiet cluster writes nothing.
func (r *reconciler) writeStatus(ctx context.Context, sb *v1alpha1.Sandbox, st v1alpha1.SandboxStatus) error {
	if equality.Semantic.DeepEqual(sb.Status, st) {
		return nil
	}
	orig := sb.DeepCopy()
	sb.Status = st
	if err := r.client.Status().Patch(ctx, sb, client.MergeFrom(orig)); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}
