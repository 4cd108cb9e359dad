// Package kamajietcd stands in for the one container of the kamaji-etcd
// chart (clastix/kamaji-etcd v0.15.0) the test bed cannot run: the
// post-install hook Job <release>-etcd-setup-2
// (templates/etcd_job_preinstall_2.yaml). Its init container waits with
// kubectl for the StatefulSet's rollout; its container runs etcdctl in the
// image quay.io/coreos/etcd, from a bash script:
//
//	if etcdctl user get root; then nothing to do
//	else user add --no-password=true root; role add root;
//	     user grant-role root root; auth enable
//
// The test bed builds no etcdctl, so this package plays the Job's Pod
// (runner.HandlePods) and makes the same calls through etcd's JSON gateway
// (/v3/auth/...), with the certificates and the endpoint the Pod's own
// volumes and environment name: the root client certificate (its CN,
// "root", is the user etcd authenticates once auth is on) and the CA, and
// ETCDCTL_ENDPOINTS, the StatefulSet's first Pod by name (the runner's
// hosts file names it on loopback). The etcd is the real one the runner
// runs for the chart's StatefulSet.
package kamajietcd

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/labctl/labctl/internal/testing/testbed/runner"
)

// Image is the name of the Job's container image (quay.io/coreos/etcd).
const Image = "etcd"

// Serve makes the runner play the setup Job's Pods.
func Serve(t interface{ Fatalf(string, ...any) }, cfg *rest.Config, r *runner.Runner) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("kamaji-etcd stand-in: %v", err)
	}
	s := &setup{cs: cs, r: r}
	r.HandlePods(Image, s.pod)
}

type setup struct {
	cs kubernetes.Interface
	r  *runner.Runner
}

// rolloutRE finds the StatefulSet the init container waits for:
// "kubectl --namespace=<ns> rollout status sts/<name> --timeout=300s".
var rolloutRE = regexp.MustCompile(`rollout status sts/([a-z0-9.-]+)`)

// pod plays one Pod of the setup Job: Pending until the StatefulSet is
// rolled out (the init container), then Succeeded once etcd has its root
// user and auth is on, Failed when etcd refuses.
func (s *setup) pod(ctx context.Context, p *corev1.Pod) (corev1.PodPhase, string) {
	if ref := metav1.GetControllerOf(p); ref == nil || ref.Kind != "Job" || len(p.Spec.Containers) != 1 || len(p.Spec.InitContainers) != 1 {
		return p.Status.Phase, ""
	}
	m := rolloutRE.FindStringSubmatch(strings.Join(p.Spec.InitContainers[0].Command, " "))
	if m == nil {
		return corev1.PodFailed, "kamaji-etcd stand-in: the init container waits for no StatefulSet the stand-in knows"
	}
	set, err := s.cs.AppsV1().StatefulSets(p.Namespace).Get(ctx, m[1], metav1.GetOptions{})
	if err != nil {
		return corev1.PodPending, fmt.Sprintf("waiting for StatefulSet %s: %v", m[1], err)
	}
	// kubectl's rollout status for a StatefulSet (RollingUpdate): the
	// observed generation, then every replica updated and ready.
	want := int32(1)
	if set.Spec.Replicas != nil {
		want = *set.Spec.Replicas
	}
	if set.Status.ObservedGeneration < set.Generation || set.Status.ReadyReplicas < want || set.Status.UpdatedReplicas < want {
		return corev1.PodPending, fmt.Sprintf("waiting for StatefulSet %s: %d of %d ready", m[1], set.Status.ReadyReplicas, want)
	}
	c := p.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	client, endpoint, err := s.client(ctx, p, c, env)
	if errors.Is(err, errWaiting) {
		// kubelet keeps such a Pod ContainerCreating.
		return corev1.PodPending, err.Error()
	}
	if err != nil {
		return corev1.PodFailed, err.Error()
	}
	if err := rootAndAuth(ctx, client, endpoint); err != nil {
		return corev1.PodFailed, err.Error()
	}
	return corev1.PodSucceeded, "root user made, auth enabled"
}

// errWaiting marks what the Pod waits for before its container starts:
// a Secret or a key its volumes mount.
var errWaiting = errors.New("waiting for")

// client is an HTTPS client with the container's ETCDCTL_CACERT and
// ETCDCTL_CERT/ETCDCTL_KEY, read from the Secrets its volumes mount, and
// the base URL of its ETCDCTL_ENDPOINTS (the first), dialed on loopback.
func (s *setup) client(ctx context.Context, p *corev1.Pod, c corev1.Container, env map[string]string) (*http.Client, string, error) {
	read := func(name string) ([]byte, error) {
		file := env[name]
		if file == "" {
			return nil, fmt.Errorf("kamaji-etcd stand-in: the container sets no %s", name)
		}
		return s.file(ctx, p, c, file)
	}
	caPEM, err := read("ETCDCTL_CACERT")
	if err != nil {
		return nil, "", err
	}
	certPEM, err := read("ETCDCTL_CERT")
	if err != nil {
		return nil, "", err
	}
	keyPEM, err := read("ETCDCTL_KEY")
	if err != nil {
		return nil, "", err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, "", fmt.Errorf("kamaji-etcd stand-in: the root client certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, "", fmt.Errorf("kamaji-etcd stand-in: ETCDCTL_CACERT holds no certificate")
	}
	first, _, _ := strings.Cut(env["ETCDCTL_ENDPOINTS"], ",")
	u, err := url.Parse(first)
	if err != nil || u.Host == "" {
		return nil, "", fmt.Errorf("kamaji-etcd stand-in: ETCDCTL_ENDPOINTS %q is not a URL", env["ETCDCTL_ENDPOINTS"])
	}
	// The name is checked against etcd's serving certificate; the
	// connection goes to loopback, where the runner runs the Pod.
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: u.Hostname(), MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", u.Port()))
		},
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, u.Scheme + "://" + u.Host, nil
}

// file reads a file of the container's filesystem that a Secret volume
// holds: the mount under which it lies, the key the rest of its path
// names.
func (s *setup) file(ctx context.Context, p *corev1.Pod, c corev1.Container, file string) ([]byte, error) {
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			sec, err := s.cs.CoreV1().Secrets(p.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("kamaji-etcd stand-in: %w: Secret %s for %s: %v", errWaiting, v.Secret.SecretName, file, err)
			}
			data, ok := sec.Data[path.Clean(rel)]
			if !ok {
				return nil, fmt.Errorf("kamaji-etcd stand-in: %w: key %s of Secret %s (for %s)", errWaiting, rel, v.Secret.SecretName, file)
			}
			return data, nil
		}
	}
	return nil, fmt.Errorf("kamaji-etcd stand-in: no Secret volume holds %s", file)
}

// rootAndAuth is the Job's script through the JSON gateway: etcdctl's
// user get, user add --no-password, role add, user grant-role and auth
// enable are these gateway calls (etcd api/etcdserverpb/rpc.proto).
func rootAndAuth(ctx context.Context, c *http.Client, base string) error {
	if err := call(ctx, c, base, "/v3/auth/user/get", map[string]any{"name": "root"}); err == nil {
		return nil
	}
	for _, step := range []struct {
		path string
		body map[string]any
	}{
		{"/v3/auth/user/add", map[string]any{"name": "root", "options": map[string]any{"no_password": true}}},
		{"/v3/auth/role/add", map[string]any{"name": "root"}},
		{"/v3/auth/user/grant", map[string]any{"user": "root", "role": "root"}},
		{"/v3/auth/enable", map[string]any{}},
	} {
		if err := call(ctx, c, base, step.path, step.body); err != nil {
			return err
		}
	}
	return nil
}

func call(ctx context.Context, c *http.Client, base, p string, body map[string]any) error {
	data, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+p, bytes.NewReader(data))
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("kamaji-etcd stand-in: %s: %w", p, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kamaji-etcd stand-in: %s: %s: %s", p, resp.Status, bytes.TrimSpace(out))
	}
	return nil
}
