package front

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hiloop/hiloop/internal/pki"
	"github.com/hiloop/hiloop/pkg/api"
	hv1 "github.com/hiloop/hiloop/pkg/apis/hiloop/v1alpha1"
)

// Agent is a node agent as the front reaches it: its Node's name, the URL of its hiloop API
// (hiloop.dev/endpoint) and the transport that pins its certificate (hiloop.dev/fingerprint)
// and presents the front's client certificate.
type Agent struct {
	Node      string
	URL       *url.URL
	Transport *http.Transport
}

// agentTransports keeps one transport per endpoint and fingerprint, so that connections to an
// agent are reused from one request to the next.
type agentTransports struct {
	front *Front
	mu    sync.Mutex
	byKey map[string]*http.Transport
}

func (a *agentTransports) get(endpoint, fingerprint string) *http.Transport {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := endpoint + " " + fingerprint
	if t := a.byKey[key]; t != nil {
		return t
	}
	if a.byKey == nil {
		a.byKey = map[string]*http.Transport{}
	}
	t := &http.Transport{
		Proxy:                 nil, // agents are reached directly, never through a proxy
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       pinnedTLS(a.front.Identity.Client, fingerprint),
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		// HTTP/1.1 only: the agent's streams take over their connection.
		ForceAttemptHTTP2: false,
	}
	a.byKey[key] = t
	return t
}

// pinnedTLS presents cert and trusts exactly the server certificate whose fingerprint is
// fingerprint: the agent's certificate is its own (or its operator's), signed by no CA the
// front knows, and its Node names it.
func pinnedTLS(cert tls.Certificate, fingerprint string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		Certificates:       []tls.Certificate{cert},
		InsecureSkipVerify: true, // verified by VerifyConnection: the pinned fingerprint
		NextProtos:         []string{"http/1.1"},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("the node agent presents no certificate")
			}
			if got := pki.Fingerprint(cs.PeerCertificates[0].Raw); got != fingerprint {
				return fmt.Errorf("the node agent presents the certificate %s, not %s as its Node says", got, fingerprint)
			}
			return nil
		},
	}
}

// AgentOf is the node agent holding sb. A sandbox without a node is sandbox_not_running; a
// node that is gone, not ready or names no endpoint is unavailable, naming the node.
func (f *Front) AgentOf(ctx context.Context, sb *hv1.Sandbox) (Agent, error) {
	name := bareName(sb.Name)
	if sb.Status.Node == "" {
		msg := fmt.Sprintf("sandbox %q has no node yet (state %s)", name, Present(sb).State)
		if sb.Status.Message != "" {
			msg += ": " + sb.Status.Message
		}
		return Agent{}, api.Errorf(api.CodeSandboxNotRunning, "%s", msg)
	}
	var n corev1.Node
	err := f.c.Get(ctx, client.ObjectKey{Name: sb.Status.Node}, &n)
	if apierrors.IsNotFound(err) {
		return Agent{}, api.Errorf(api.CodeUnavailable, "sandbox %q is on node %s, which is no longer in the cluster", name, sb.Status.Node)
	}
	if err != nil {
		return Agent{}, storeErr(err)
	}
	a, err := f.agent(&n)
	if err != nil {
		return Agent{}, api.Errorf(api.CodeUnavailable, "sandbox %q is on node %s: %v", name, n.Name, err)
	}
	return a, nil
}

// agent is the node agent of n, when it is ready and names its endpoint.
func (f *Front) agent(n *corev1.Node) (Agent, error) {
	if !nodeReady(n) {
		return Agent{}, fmt.Errorf("the node is not ready (its agent does not answer the cluster)")
	}
	endpoint, fp := n.Annotations[hv1.AnnotationEndpoint], n.Annotations[hv1.AnnotationFingerprint]
	if endpoint == "" || fp == "" {
		return Agent{}, fmt.Errorf("the node names no hiloop endpoint and fingerprint (%s, %s)", hv1.AnnotationEndpoint, hv1.AnnotationFingerprint)
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return Agent{}, fmt.Errorf("the node's %s %q is no https://HOST:PORT", hv1.AnnotationEndpoint, endpoint)
	}
	return Agent{Node: n.Name, URL: u, Transport: f.agents.get(endpoint, fp)}, nil
}

// ReadyAgents are the node agents the front can reach now, by node name; unready is the names
// of the agent nodes it cannot.
func (f *Front) ReadyAgents(ctx context.Context) (ready []Agent, unready []string, err error) {
	var nodes corev1.NodeList
	if err := f.c.List(ctx, &nodes, client.MatchingLabels{hv1.LabelAgent: "true"}); err != nil {
		return nil, nil, storeErr(err)
	}
	for i := range nodes.Items {
		a, err := f.agent(&nodes.Items[i])
		if err != nil {
			unready = append(unready, nodes.Items[i].Name)
			continue
		}
		ready = append(ready, a)
	}
	slices.SortFunc(ready, func(a, b Agent) int { return strings.Compare(a.Node, b.Node) })
	slices.Sort(unready)
	return ready, unready, nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
