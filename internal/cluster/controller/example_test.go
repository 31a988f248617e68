package controller_test

import (
	"context"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/hiloop/hiloop/internal/cluster/controller"
)

// How the front runs the controller: one manager per replica, leader-elected on a Lease in the
// front's own namespace; its cache also serves the front's reads.
func Example() {
	run := func(ctx context.Context, cfg *rest.Config, namespace string) error {
		opts, err := controller.ManagerOptions(namespace)
		if err != nil {
			return err
		}
		mgr, err := manager.New(cfg, opts)
		if err != nil {
			return err
		}
		if err := controller.Add(mgr, controller.Options{}); err != nil {
			return err
		}
		return mgr.Start(ctx) // until ctx ends; the Lease is released on the way out
	}
	_ = run
}
