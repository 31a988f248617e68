package daemon

import clusterusers "github.com/hiloop/hiloop/internal/cluster/users"

// A cluster's front serves the authenticator and the user routes over the cluster's users.
var _ userStore = (*clusterusers.Store)(nil)
