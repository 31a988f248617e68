// Package deploy holds hiloop's install manifests for a Kubernetes cluster: kustomization.yaml
// and the files it names (the CRDs, the RBAC of the agents, the front and the users, the node
// agents' DaemonSet and the front's Deployment). It has no Go code; its test renders the
// manifests with kubectl's kustomize, applies them to a real API server, and checks them
// against sandboxd's own flags.
package deploy
