// Package k8stest runs a real Kubernetes control plane for tests: etcd, kube-apiserver,
// kube-scheduler and kube-controller-manager as processes on loopback, on free ports, with their
// files (PKI, etcd's data, logs) in the test's temporary directory. The API server is set up as a
// real cluster's is (client certificates, Node and RBAC authorization, service account tokens,
// the ResourceQuota, LimitRanger and Priority admission plugins); there are no kubelets, so nodes
// are whatever a test or an agent registers.
//
// The binaries come from the directory in HILOOP_K8S_BIN, which tools/k8s/build.sh fills and
// `make test` sets. Without it a test skips, or fails when CI=true. The package owns only the
// processes and files it starts; it installs nothing into the cluster beyond what the control
// plane bootstraps itself.
package k8stest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/hiloop/hiloop/internal/pki"
)

// BinEnv names the environment variable that holds the directory of the control plane's
// binaries: etcd, kube-apiserver, kube-scheduler, kube-controller-manager (and kubectl).
const BinEnv = "HILOOP_K8S_BIN"

// DefaultControllers are the kube-controller-manager controllers a cluster runs unless Options
// says otherwise: those that do their work through the API alone, without kubelets or a cloud.
var DefaultControllers = []string{
	"serviceaccount-token-controller",          // tokens for the controllers' own service accounts
	"serviceaccount-controller",                // the "default" service account a Pod needs
	"root-ca-certificate-publisher-controller", // kube-root-ca.crt in every namespace
	"clusterrole-aggregation-controller",       // the admin, edit and view roles
	"namespace-controller",                     // deleting a namespace deletes what is in it
	"garbage-collector-controller",             // owner references
	"resourcequota-controller",                 // quota usage
	"node-lifecycle-controller",                // NotReady/unreachable taints when a node stops reporting
	"taint-eviction-controller",                // deletes Pods from nodes tainted NoExecute
	"pod-garbage-collector-controller",         // Pods of deleted nodes
	"replicaset-controller",
	"deployment-controller",
	"statefulset-controller",
	"job-controller",
	"endpointslice-controller",
	"persistentvolume-binder-controller", // binds claims to (hand-made) volumes
	"persistentvolumeclaim-protection-controller",
	"persistentvolume-protection-controller",
	"certificatesigningrequest-signing-controller",
	"certificatesigningrequest-approving-controller",
	"certificatesigningrequest-cleaner-controller",
}

// Options changes how Start sets the cluster up. The zero value runs every part.
type Options struct {
	// NoScheduler leaves kube-scheduler out: Pods stay unbound unless the test binds them.
	NoScheduler bool
	// NoControllerManager leaves kube-controller-manager out: no node lifecycle, no quota usage,
	// no garbage collection, and no "default" service account, so the API server refuses Pods
	// until the test makes one.
	NoControllerManager bool
	// Controllers replaces DefaultControllers (kube-controller-manager --controllers).
	Controllers []string
	// APIServerArgs, SchedulerArgs and ControllerManagerArgs are flags added after the ones
	// Start sets (a flag given twice: the later one wins).
	APIServerArgs         []string
	SchedulerArgs         []string
	ControllerManagerArgs []string
	// StartTimeout bounds the bring-up, and StartAPIServer; 0 means 3 minutes (a loaded CI
	// machine is slow to start an API server).
	StartTimeout time.Duration
}

// Cluster is a running control plane. Start stops it when the test ends.
type Cluster struct {
	// Config is the client configuration of an administrator (group system:masters).
	Config *rest.Config
	// Kubeconfig is the path of the administrator's kubeconfig file, for kubectl --kubeconfig
	// or a process a test starts.
	Kubeconfig string
	// Host is the API server's URL, https://127.0.0.1:PORT; it stays the same across
	// StopAPIServer and StartAPIServer.
	Host string
	// CAPEM is the cluster CA's certificate (PEM): the API server's serving certificate and every
	// client certificate the cluster accepts chain to it.
	CAPEM []byte
	// Dir holds the cluster's files: pki/, etcd/, and NAME.log for each process.
	Dir string
	// BinDir is the directory of the binaries (HILOOP_K8S_BIN), kubectl among them.
	BinDir string
	// BringUp is how long Start took, from the first process started to the last one ready.
	BringUp time.Duration

	tb        testing.TB
	ca        *pki.CA
	timeout   time.Duration
	etcdURL   string
	etcd      *process
	apiserver *process
	scheduler *process
	kcm       *process
	procs     []*process // in start order
	stopOnce  sync.Once
	nameMu    sync.Mutex
	names     map[string]int // kubeconfig file names handed out
}

// Start brings a cluster up and registers its Stop with tb.Cleanup. It fails tb if any part does
// not become ready, dumping the end of every log; it skips when HILOOP_K8S_BIN is unset, unless
// CI=true.
func Start(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	binDir := os.Getenv(BinEnv)
	if binDir == "" {
		msg := BinEnv + " is unset: `make test` sets it, or export " + BinEnv + "=$(tools/k8s/build.sh)"
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	need := []string{"etcd", "kube-apiserver"}
	if !opts.NoScheduler {
		need = append(need, "kube-scheduler")
	}
	if !opts.NoControllerManager {
		need = append(need, "kube-controller-manager")
	}
	for _, name := range need {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			tb.Fatalf("%s=%s has no %s: %v", BinEnv, binDir, name, err)
		}
	}

	c := &Cluster{tb: tb, Dir: tb.TempDir(), BinDir: binDir, timeout: opts.StartTimeout, names: map[string]int{}}
	if c.timeout == 0 {
		c.timeout = 3 * time.Minute
	}
	tb.Cleanup(c.Stop)
	if err := c.start(binDir, opts); err != nil {
		tb.Fatalf("k8stest: %v", err) // Stop dumps the logs
	}
	tb.Logf("k8stest: cluster up in %s at %s (files in %s)", c.BringUp.Round(time.Millisecond), c.Host, c.Dir)
	return c
}

func (c *Cluster) start(binDir string, opts Options) error {
	pkiDir := filepath.Join(c.Dir, "pki")
	ca, err := pki.LoadOrCreateCA(pkiDir, "hiloop-k8stest-ca")
	if err != nil {
		return err
	}
	c.ca, c.CAPEM = ca, ca.PEM
	caFile := filepath.Join(pkiDir, pki.CACertFile)
	caKeyFile := filepath.Join(pkiDir, pki.CAKeyFile)
	files := map[string][2]string{} // name → cert, key
	issueTo := func(name string, kp keyPair, err error) error {
		if err != nil {
			return fmt.Errorf("certificate %s: %w", name, err)
		}
		crt, key, err := kp.write(filepath.Join(pkiDir, name))
		files[name] = [2]string{crt, key}
		return err
	}
	loopback := []string{"127.0.0.1", "localhost"}
	kp, err := servingCert(ca, "kube-apiserver", append(loopback, "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc.cluster.local", serviceIP))
	if err := issueTo("apiserver", kp, err); err != nil {
		return err
	}
	kp, err = clientCert(ca, "kube-apiserver-kubelet-client", []string{"system:masters"})
	if err := issueTo("apiserver-kubelet-client", kp, err); err != nil {
		return err
	}
	// The front proxy's CA and client: how the API server authenticates to extension API
	// servers, and what the scheduler and the controller manager read from it to authenticate
	// their own clients, as on a kubeadm cluster.
	proxyCA, err := pki.LoadOrCreate(pkiDir, "front-proxy-ca.key", "front-proxy-ca.crt", "hiloop-k8stest-front-proxy-ca")
	if err != nil {
		return err
	}
	kp, err = clientCert(proxyCA, "front-proxy-client", nil)
	if err := issueTo("front-proxy-client", kp, err); err != nil {
		return err
	}
	admin, err := clientCert(ca, "kubernetes-admin", []string{"system:masters"})
	if err != nil {
		return err
	}
	saKey, saPub, err := writeSigningKey(filepath.Join(pkiDir, "sa"))
	if err != nil {
		return err
	}

	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()

	// etcd
	c.etcd = c.newProcess(binDir, "etcd")
	err = c.startRetrying(ctx, c.etcd, func() error {
		clientPort, err1 := freePort()
		peerPort, err2 := freePort()
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		c.etcdURL = "http://127.0.0.1:" + strconv.Itoa(clientPort)
		peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
		// A retry starts afresh: a data dir remembers the peer URL it was made with.
		dataDir := filepath.Join(c.Dir, "etcd")
		if err := os.RemoveAll(dataDir); err != nil {
			return err
		}
		c.etcd.args = []string{
			"--name=default", "--data-dir=" + dataDir,
			"--listen-client-urls=" + c.etcdURL, "--advertise-client-urls=" + c.etcdURL,
			"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=default=" + peer,
			"--logger=zap", "--log-outputs=stderr",
		}
		return nil
	}, func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, c.etcdURL+"/health")
	})
	if err != nil {
		return err
	}

	// kube-apiserver
	c.apiserver = c.newProcess(binDir, "kube-apiserver")
	err = c.startRetrying(ctx, c.apiserver, func() error {
		port, err := freePort()
		if err != nil {
			return err
		}
		c.Host = "https://127.0.0.1:" + strconv.Itoa(port)
		c.Config = c.restConfig(admin)
		c.apiserver.args = append([]string{
			"--etcd-servers=" + c.etcdURL,
			"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
			"--advertise-address=127.0.0.1",
			// No kubelet serves the kubernetes Service, and a loopback address may not be an
			// endpoint: the Service is there, its endpoints are not kept.
			"--endpoint-reconciler-type=none",
			"--cert-dir=" + filepath.Join(c.Dir, "kube-apiserver"),
			"--tls-cert-file=" + files["apiserver"][0], "--tls-private-key-file=" + files["apiserver"][1],
			"--client-ca-file=" + caFile,
			"--kubelet-client-certificate=" + files["apiserver-kubelet-client"][0],
			"--kubelet-client-key=" + files["apiserver-kubelet-client"][1],
			"--kubelet-certificate-authority=" + caFile,
			"--requestheader-client-ca-file=" + filepath.Join(pkiDir, "front-proxy-ca.crt"),
			"--requestheader-allowed-names=front-proxy-client",
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--proxy-client-cert-file=" + files["front-proxy-client"][0],
			"--proxy-client-key-file=" + files["front-proxy-client"][1],
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + saPub, "--service-account-signing-key-file=" + saKey,
			"--service-cluster-ip-range=" + serviceCIDR,
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,NodeRestriction," +
				"TaintNodesByCondition,Priority,DefaultTolerationSeconds,ResourceQuota",
			"--allow-privileged=true",
			// On SIGTERM, drain and exit in seconds rather than wait out the watches for up to
			// --request-timeout (60 s): StopAPIServer is then quick.
			"--shutdown-send-retry-after=true",
		}, opts.APIServerArgs...)
		return nil
	}, c.apiserverReady)
	if err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, c.Host, c.CAPEM, "kubernetes-admin", admin); err != nil {
		return err
	}

	// kube-scheduler and kube-controller-manager start together and are waited for in turn.
	var waits []func() error
	if !opts.NoScheduler {
		c.scheduler = c.newProcess(binDir, "kube-scheduler")
		wait, err := c.startComponent(ctx, c.scheduler, "system:kube-scheduler", opts.SchedulerArgs, "/readyz")
		if err != nil {
			return err
		}
		waits = append(waits, wait)
	}
	if !opts.NoControllerManager {
		controllers := opts.Controllers
		if controllers == nil {
			controllers = DefaultControllers
		}
		c.kcm = c.newProcess(binDir, "kube-controller-manager")
		args := append([]string{
			"--controllers=" + strings.Join(controllers, ","),
			"--use-service-account-credentials=true",
			"--service-account-private-key-file=" + saKey,
			"--root-ca-file=" + caFile,
			"--cluster-signing-cert-file=" + caFile, "--cluster-signing-key-file=" + caKeyFile,
		}, opts.ControllerManagerArgs...)
		wait, err := c.startComponent(ctx, c.kcm, "system:kube-controller-manager", args, "/healthz")
		if err != nil {
			return err
		}
		waits = append(waits, wait)
		if slices.Contains(controllers, "serviceaccount-controller") {
			waits = append(waits, func() error { return c.waitDefaultServiceAccount(ctx) })
		}
	}
	for _, wait := range waits {
		if err := wait(); err != nil {
			return err
		}
	}
	c.BringUp = time.Since(began)
	return nil
}

// The cluster's service network; the kubernetes Service takes its first address.
const (
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"
)

func (c *Cluster) newProcess(binDir, name string) *process {
	p := &process{name: name, path: filepath.Join(binDir, name), logPath: filepath.Join(c.Dir, name+".log")}
	c.procs = append(c.procs, p)
	return p
}

// startRetrying sets p's arguments with configure (which picks its ports), starts it and waits
// until ready says it is. When p could not bind a port it picked, it tries again with new ones.
func (c *Cluster) startRetrying(ctx context.Context, p *process, configure func() error, ready func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		if err := configure(); err != nil {
			return err
		}
		offset := p.logSize()
		if err := p.start(); err != nil {
			return err
		}
		err := p.waitReady(ctx, ready)
		if err == nil {
			return nil
		}
		p.stop(stopGrace)
		if attempt < 3 && p.portInUse(offset) {
			c.tb.Logf("k8stest: %s could not bind a port picked for it; trying others", p.name)
			continue
		}
		return err
	}
}

// startComponent starts the scheduler or the controller manager as user, serving on a free port
// with a certificate of the cluster CA, and returns a function that waits for healthPath there.
func (c *Cluster) startComponent(ctx context.Context, p *process, user string, extra []string, healthPath string) (func() error, error) {
	pkiDir := filepath.Join(c.Dir, "pki")
	kp, err := clientCert(c.ca, user, nil)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(c.Dir, p.name+".kubeconfig")
	if err := writeKubeconfig(kubeconfig, c.Host, c.CAPEM, user, kp); err != nil {
		return nil, err
	}
	kp, err = servingCert(c.ca, p.name, []string{"127.0.0.1", "localhost"})
	if err != nil {
		return nil, err
	}
	crt, key, err := kp.write(filepath.Join(pkiDir, p.name+"-serving"))
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.ca.Pool()}}}
	var url string
	configure := func() error {
		port, err := freePort()
		if err != nil {
			return err
		}
		url = "https://127.0.0.1:" + strconv.Itoa(port) + healthPath
		p.args = append([]string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
			"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + filepath.Join(c.Dir, p.name),
			"--tls-cert-file=" + crt, "--tls-private-key-file=" + key,
			"--leader-elect=false",
		}, extra...)
		return nil
	}
	if err := configure(); err != nil {
		return nil, err
	}
	if err := p.start(); err != nil {
		return nil, err
	}
	wait := func() error {
		ready := func(ctx context.Context) error { return httpOK(ctx, client, url) }
		err := p.waitReady(ctx, ready)
		if err != nil && p.portInUse(0) {
			p.stop(stopGrace)
			return c.startRetrying(ctx, p, configure, ready)
		}
		return err
	}
	return wait, nil
}

// apiserverReady is nil once the API server's /readyz says ok: etcd reachable, the bootstrap
// RBAC roles and priority classes in place.
func (c *Cluster) apiserverReady(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("%v: %s", err, body)
	}
	return nil
}

// waitDefaultServiceAccount waits for the "default" service account of namespace default:
// until the controller manager makes it, the API server refuses Pods there.
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	return c.kcm.waitReady(ctx, func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return errors.New("no service account default/default yet")
		}
		return err
	})
}

// httpOK is nil when GET url answers 200.
func httpOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// stopGrace is how long a process has to exit after SIGTERM before it gets SIGKILL.
const stopGrace = 20 * time.Second

// restConfig is a client configuration presenting kp. Its rate limit is raised from client-go's
// default (5/s), which would throttle a test more than the server does.
func (c *Cluster) restConfig(kp keyPair) *rest.Config {
	return &rest.Config{
		Host:  c.Host,
		QPS:   100,
		Burst: 200,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.CAPEM,
			CertData: kp.certPEM,
			KeyData:  kp.keyPEM,
		},
	}
}

// Client is a clientset for the administrator (Config).
func (c *Cluster) Client() kubernetes.Interface {
	c.tb.Helper()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		c.tb.Fatalf("k8stest: %v", err)
	}
	return cs
}

// UserConfig is the client configuration of another identity: a client certificate for user in
// groups, signed by the cluster CA. A node agent is "system:node:NAME" in "system:nodes" (the
// Node authorizer then limits it to its node); any other name is subject to RBAC.
func (c *Cluster) UserConfig(user string, groups ...string) *rest.Config {
	c.tb.Helper()
	kp, err := clientCert(c.ca, user, groups)
	if err != nil {
		c.tb.Fatalf("k8stest: %v", err)
	}
	return c.restConfig(kp)
}

// UserKubeconfig writes a kubeconfig file for user in groups (as UserConfig) into Dir and
// returns its path, for a process the test starts.
func (c *Cluster) UserKubeconfig(user string, groups ...string) string {
	c.tb.Helper()
	kp, err := clientCert(c.ca, user, groups)
	if err != nil {
		c.tb.Fatalf("k8stest: %v", err)
	}
	path := filepath.Join(c.Dir, c.fileName(user)+".kubeconfig")
	if err := writeKubeconfig(path, c.Host, c.CAPEM, user, kp); err != nil {
		c.tb.Fatalf("k8stest: %v", err)
	}
	return path
}

// ServingCertificate is a TLS server certificate (and its key, both PEM) for hosts (DNS names
// or IP addresses) signed by the cluster CA, which the API server trusts for kubelets: what a
// node agent serves the kubelet API (logs, exec) with.
func (c *Cluster) ServingCertificate(hosts ...string) (certPEM, keyPEM []byte) {
	c.tb.Helper()
	kp, err := servingCert(c.ca, "k8stest-serving", hosts)
	if err != nil {
		c.tb.Fatalf("k8stest: %v", err)
	}
	return kp.certPEM, kp.keyPEM
}

// CAPool is a certificate pool holding the cluster CA.
func (c *Cluster) CAPool() *x509.CertPool { return c.ca.Pool() }

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// fileName is a file name for user, unique in Dir.
func (c *Cluster) fileName(user string) string {
	c.nameMu.Lock()
	defer c.nameMu.Unlock()
	base := "user-" + unsafeFileChars.ReplaceAllString(user, "_")
	c.names[base]++
	if n := c.names[base]; n > 1 {
		return base + "-" + strconv.Itoa(n)
	}
	return base
}

// StopAPIServer stops the API server (SIGTERM, as a node's shutdown would) and waits for it
// to be gone; etcd, the scheduler and the controller manager keep running. Clients get
// connection errors until StartAPIServer.
func (c *Cluster) StopAPIServer() {
	c.tb.Helper()
	c.apiserver.stop(stopGrace)
}

// StartAPIServer starts the API server again, on the same address with the same flags, and
// waits until it is ready.
func (c *Cluster) StartAPIServer() {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if err := c.apiserver.start(); err != nil {
		c.tb.Fatalf("k8stest: %v", err)
	}
	if err := c.apiserver.waitReady(ctx, c.apiserverReady); err != nil {
		c.tb.Fatalf("k8stest: %v", err) // Stop dumps the logs
	}
}

// RSS is the resident memory, in bytes, of each running process by name.
func (c *Cluster) RSS() map[string]int64 {
	m := map[string]int64{}
	for _, p := range c.procs {
		if n := p.rss(); n > 0 {
			m[p.name] = n
		}
	}
	return m
}

// Stop stops every process (the last started first) and waits for each to exit. A process that
// exited on its own before then fails the test; the ends of the logs are dumped when the test
// failed. Start registers Stop with t.Cleanup; calling it again does nothing.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		var crashes []error
		for _, p := range c.procs {
			if err := p.crash(); err != nil {
				crashes = append(crashes, err)
			}
		}
		for _, p := range slices.Backward(c.procs) {
			p.stop(stopGrace)
		}
		if len(crashes) > 0 {
			c.tb.Errorf("k8stest: %v", errors.Join(crashes...))
		}
		if c.tb.Failed() {
			c.dumpLogs()
		}
	})
}

// dumpLogs logs the end of every process's log.
func (c *Cluster) dumpLogs() {
	for _, p := range c.procs {
		c.tb.Logf("k8stest: the end of %s:\n%s", p.logPath, p.tail(40))
	}
}

// writeKubeconfig writes a kubeconfig for server with everything inline, so the file stands alone.
func writeKubeconfig(path, server string, caPEM []byte, user string, kp keyPair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["k8stest"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.certPEM, ClientKeyData: kp.keyPEM}
	cfg.Contexts["k8stest"] = &clientcmdapi.Context{Cluster: "k8stest", AuthInfo: user}
	cfg.CurrentContext = "k8stest"
	return clientcmd.WriteToFile(*cfg, path)
}
