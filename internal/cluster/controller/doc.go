// Package controller is hiloop's Kubernetes controller: for every Sandbox (hiloop.dev/v1alpha1)
// it keeps the placement Pod the scheduler binds to a node agent (one while the Sandbox is
// running, none while it is stopped), writes all of the Sandbox's status from that Pod, its Node
// and the API server's quota refusals, and holds the hiloop.dev/workspace finalizer on every
// Sandbox, removing it itself only for a Sandbox that was never placed (or whose node is gone).
//
// It runs inside every front replica, one active at a time through a Lease leader election
// (ManagerOptions). It writes only Pods, Sandbox status and Sandbox finalizers: a Sandbox's spec
// is the front's, a Pod's status and a placed Sandbox's deletion are the node agent's.
package controller
