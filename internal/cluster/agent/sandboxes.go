package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	hapi "github.com/hiloop/hiloop/pkg/api"
	hv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// sandboxWatch keeps the cluster's Sandboxes in a cache, for a Pod's create to read its
// Sandbox, and deletes here the workspace of every deleted Sandbox placed on this node, then
// lets it go (the finalizer hiloop.dev/workspace).
type sandboxWatch struct {
	a       *Agent
	factory dynamicinformer.DynamicSharedInformerFactory
	lister  cache.GenericLister
	queue   workqueue.TypedRateLimitingInterface[types.NamespacedName]
}

func newSandboxWatch(a *Agent) *sandboxWatch {
	f := dynamicinformer.NewDynamicSharedInformerFactory(a.dyn, 10*time.Minute)
	return &sandboxWatch{
		a:       a,
		factory: f,
		lister:  f.ForResource(hv1.SandboxResource).Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "sandbox-deletions"}),
	}
}

// start fills the cache and starts deleting; it returns once the cache is filled.
func (w *sandboxWatch) start(ctx context.Context) error {
	inf := w.factory.ForResource(hv1.SandboxResource).Informer()
	enqueue := func(obj any) {
		if sb, err := toSandbox(obj); err == nil && w.mine(sb) {
			w.queue.Add(types.NamespacedName{Namespace: sb.Namespace, Name: sb.Name})
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	w.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("list the Sandboxes (%s): %w", hv1.SandboxResource, ctx.Err())
	}
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	go func() {
		for w.next(ctx) {
		}
	}()
	return nil
}

// mine says whether sb is a deleted Sandbox whose workspace is on this node and whose
// finalizer is still to be removed.
func (w *sandboxWatch) mine(sb *hv1.Sandbox) bool {
	return sb.DeletionTimestamp != nil && sb.Status.Node == w.a.cfg.NodeName &&
		slices.Contains(sb.Finalizers, hv1.FinalizerWorkspace)
}

func (w *sandboxWatch) next(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	if err := w.release(ctx, key); err != nil {
		w.a.log.Warn("delete a deleted Sandbox's workspace", "sandbox", key.String(), "err", err)
		w.queue.AddRateLimited(key)
		return true
	}
	w.queue.Forget(key)
	return true
}

// release deletes the local sandbox of the deleted Sandbox key, with its snapshots, and then
// removes the Sandbox's finalizer.
func (w *sandboxWatch) release(ctx context.Context, key types.NamespacedName) error {
	sb, err := w.get(key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || !w.mine(sb) {
		return err
	}
	if err := w.a.cfg.Sandboxes.Delete(ctx, sb.Name); err != nil && !isCode(err, hapi.CodeSandboxNotFound) {
		return err
	}
	w.a.log.Info("deleted the workspace of a deleted Sandbox", "sandbox", key.String())
	// A merge patch that names the resourceVersion: a Sandbox changed meanwhile is read again.
	finalizers := slices.DeleteFunc(slices.Clone(sb.Finalizers), func(f string) bool { return f == hv1.FinalizerWorkspace })
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": sb.ResourceVersion,
		"finalizers":      finalizers,
	}})
	if err != nil {
		return err
	}
	_, err = w.a.dyn.Resource(hv1.SandboxResource).Namespace(sb.Namespace).Patch(ctx, sb.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// get is the Sandbox ns/name from the cache, or from the API server when the cache does not
// have it yet (a Pod made right after its Sandbox).
func (w *sandboxWatch) get(ns, name string) (*hv1.Sandbox, error) {
	obj, err := w.lister.ByNamespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		obj, err = w.a.dyn.Resource(hv1.SandboxResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, err
	}
	return toSandbox(obj)
}

// toSandbox converts what the dynamic client and its cache hold.
func toSandbox(obj any) (*hv1.Sandbox, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("not a Sandbox: %T", obj)
	}
	var sb hv1.Sandbox
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// isCode says whether err is a hiloop error with code.
func isCode(err error, code hapi.ErrorCode) bool {
	var e *hapi.Error
	return errors.As(err, &e) && e.Code == code
}

// placedHere is the Sandbox named key that is placed on this node (status.node), if the cache
// has one.
func (w *sandboxWatch) placedHere(key string) (*hv1.Sandbox, bool) {
	objs, err := w.lister.List(labels.Everything())
	if err != nil {
		return nil, false
	}
	for _, obj := range objs {
		sb, err := toSandbox(obj)
		if err == nil && sb.Name == key && sb.Status.Node == w.a.cfg.NodeName && sb.DeletionTimestamp == nil {
			return sb, true
		}
	}
	return nil, false
}
