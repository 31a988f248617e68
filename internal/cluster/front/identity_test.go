package front

import (
	"context"
	"crypto/x509"
	"log/slog"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hiloop/hiloop/internal/cluster/controller"
	"github.com/hiloop/hiloop/internal/k8stest"
	"github.com/hiloop/hiloop/internal/pki"
)

// Replicas starting together end up with one identity: the first create wins, the others read
// it; the fronts' CA, which the agents trust, signs no certificate a user or the server holds.
func TestLoadIdentity(t *testing.T) {
	c := k8stest.Start(t, k8stest.Options{NoScheduler: true, NoControllerManager: true})
	ctx := context.Background()
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fronts"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scheme, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	const replicas = 4
	ids := make([]Identity, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			ids[i], errs[i] = LoadIdentity(ctx, kc, "fronts", []string{"front.example", "10.0.0.7"}, slog.New(slog.DiscardHandler))
		})
	}
	wg.Wait()
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if ids[i].Fingerprint != ids[0].Fingerprint || !ids[i].CA.Cert.Equal(ids[0].CA.Cert) || !ids[i].UsersCA.Cert.Equal(ids[0].UsersCA.Cert) {
			t.Errorf("replica %d has another identity", i)
		}
	}
	id := ids[0]
	leaf := id.Serving.Leaf
	for _, name := range []string{"front.example", "10.0.0.7", "hiloop-front.fronts.svc", "hiloop-front"} {
		if err := leaf.VerifyHostname(name); err != nil {
			t.Errorf("the serving certificate: %v", err)
		}
	}
	if pki.Fingerprint(leaf.Raw) != id.Fingerprint {
		t.Errorf("fingerprint %s is not the serving certificate's", id.Fingerprint)
	}
	// The agents trust the fronts' CA: it verifies every replica's client certificate, and
	// neither the serving certificate nor a user's (signed by the users' CA).
	fronts := x509.NewCertPool()
	cm, err := c.Client().CoreV1().ConfigMaps("fronts").Get(ctx, CAConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !fronts.AppendCertsFromPEM([]byte(cm.Data[CAConfigMapKey])) {
		t.Fatalf("ConfigMap %s holds no certificate: %v", CAConfigMapName, cm.Data)
	}
	clientAuth := x509.VerifyOptions{Roots: fronts, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for i := range replicas {
		if _, err := ids[i].Client.Leaf.Verify(clientAuth); err != nil {
			t.Errorf("replica %d's client certificate: %v", i, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: fronts, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
		t.Error("the fronts' CA signed the serving certificate")
	}
	_, csr, err := pki.NewKeyAndCSR("alice")
	if err != nil {
		t.Fatal(err)
	}
	user, err := id.UsersCA.SignClient(csr, "alice", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := user.Verify(clientAuth); err == nil {
		t.Error("a user's certificate passes for a front's")
	}

	// A Secret that is not an identity stops the start, and says how to start over.
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "broken"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := kc.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: "broken"}, Data: map[string][]byte{SecretCACert: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadIdentity(ctx, kc, "broken", nil, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "delete the Secret") {
		t.Errorf("a broken Secret: %v", err)
	}
}
