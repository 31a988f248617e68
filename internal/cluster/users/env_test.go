package users

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/hiloop/hiloop/internal/testenv"
	hiloopv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// One API server (etcd and kube-apiserver, envtest) with deploy/crds installed serves the
// package's tests, which run one after the other and start from no Users.
var (
	envOnce sync.Once
	env     *envtest.Environment
	envCfg  *rest.Config
	envErr  error // the API server did not start
	binErr  error // there are no binaries to start it with
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the API server:", err)
		}
	}
	os.Exit(code)
}

// k8sBin is the directory of kube-apiserver and etcd: KUBEBUILDER_ASSETS, HILOOP_K8S_BIN, or
// the one `make k8s` caches.
func k8sBin() (string, error) {
	for _, v := range []string{"KUBEBUILDER_ASSETS", "HILOOP_K8S_BIN"} {
		if dir := os.Getenv(v); dir != "" {
			return dir, nil
		}
	}
	found, _ := filepath.Glob("/var/cache/hiloop-test/k8s/*/bin/kube-apiserver")
	for _, apiserver := range found {
		dir := filepath.Dir(apiserver)
		if _, err := os.Stat(filepath.Join(dir, "etcd")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("no kube-apiserver and etcd: set KUBEBUILDER_ASSETS or HILOOP_K8S_BIN, or run `make k8s`")
}

// apiServer returns the config of the package's API server, started on first use, after
// deleting every User a test before left.
func apiServer(t *testing.T) *rest.Config {
	t.Helper()
	envOnce.Do(func() {
		dir, err := k8sBin()
		if err != nil {
			binErr = err
			return
		}
		e := &envtest.Environment{
			BinaryAssetsDirectory: dir,
			CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "deploy", "crds")},
			ErrorIfCRDPathMissing: true,
		}
		if envCfg, envErr = e.Start(); envErr == nil {
			env = e
		}
	})
	if binErr != nil {
		testenv.Unavailable(t, "this test needs a Kubernetes API server: %v", binErr)
	}
	if envErr != nil {
		t.Fatalf("start the API server: %v", envErr)
	}
	c := rawClient(t)
	if err := c.DeleteAllOf(context.Background(), &hiloopv1.User{}); err != nil {
		t.Fatal(err)
	}
	return envCfg
}

// rawClient reaches the API server directly, as kubectl would.
func rawClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(envCfg, client.Options{Scheme: Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// front opens a Store as one front replica does, until the test ends.
func front(t *testing.T, cfg *rest.Config) *Store {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := Open(ctx, cfg, Options{DefaultNamespace: "hiloop-users"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// eventually waits until cond holds, failing the test if it never does, and returns how long
// it took. There is no fixed timeout: a loaded machine is slow, not wrong.
func eventually(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := testenv.Deadline(t)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return time.Since(start)
}
