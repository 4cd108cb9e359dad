package access_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/labctl/labctl/internal/access"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed/box"
	"github.com/labctl/labctl/internal/ui"
)

// TestReadOnlyKubeconfig hands out a read-only kubeconfig of a real
// kube-apiserver, whose kube-controller-manager fills the aggregated
// ClusterRole view as in any cluster, and uses it as a user would: pods
// of every namespace are listed, Secrets are Forbidden, a second run
// changes nothing, --revoke ends the token at once, and a token left alone
// is refused once its TTL has passed. The API server's shortest TTL is 10
// minutes and it allows a minute of clock skew (go-jose's DefaultLeeway,
// which k8s.io/kubernetes pkg/serviceaccount/claims.go uses), so this test
// waits about 11 minutes; the other tests of the package run meanwhile.
func TestReadOnlyKubeconfig(t *testing.T) {
	b := box.Start(t, box.Bare())
	ctx := t.Context()
	admin, err := os.ReadFile(b.Env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	acs, err := kubernetes.NewForConfig(b.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
	}
	if _, err := acs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "lab1-kubeconfig", Namespace: "default"}, StringData: map[string]string{"value": "admin"}}
	if _, err := acs.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	export := func(name string, ttl time.Duration) (string, string) {
		t.Helper()
		io, _, _, errb := ui.Test()
		o := access.Options{IO: io, Admin: admin, What: "the box", TTL: ttl, RevokeCommand: "revoke"}
		path := filepath.Join(dir, name)
		if err := access.Export(ctx, o, kube.ExportOptions{Write: path, Name: "box-readonly"}); err != nil {
			t.Fatalf("read-only export: %v\n%s", err, errb.String())
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
		}
		return path, errb.String()
	}
	clientOf := func(path string) *kubernetes.Clientset {
		t.Helper()
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg.CertData) > 0 || len(cfg.KeyData) > 0 || cfg.CertFile != "" {
			t.Fatalf("the read-only kubeconfig carries a client certificate: it must hold only its token")
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	// view is filled by kube-controller-manager's clusterrole-aggregation
	// controller a moment after the API server starts.
	looks := func(cs *kubernetes.Clientset) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err == nil {
				if !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return p.Namespace == "default" && p.Name == "web" }) {
					t.Fatalf("get pods -A with the read-only kubeconfig: %d pods, none is default/web", len(pods.Items))
				}
				break
			}
			if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
				t.Fatalf("get pods -A with the read-only kubeconfig: %v", err)
			}
			time.Sleep(time.Second)
		}
		_, err := cs.CoreV1().Secrets("default").Get(ctx, "lab1-kubeconfig", metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("get secret with the read-only kubeconfig: %v, want Forbidden", err)
		}
		_, err = cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("get secrets -A with the read-only kubeconfig: %v, want Forbidden", err)
		}
		_, err = cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: pod.Spec}, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("create pod with the read-only kubeconfig: %v, want Forbidden", err)
		}
	}

	first, msg := export("first", time.Hour)
	if !strings.Contains(msg, "expires at") {
		t.Errorf("the export does not say when the token expires:\n%s", msg)
	}
	looks(clientOf(first))

	// A second run writes no RBAC object: server-side apply of the same
	// objects is a no-op.
	c := kube.NewForConfig(b.Env.Config, "box")
	cs, err := c.Plan(ctx, access.Objects())
	if err != nil {
		t.Fatal(err)
	}
	if ch := kube.Changed(cs); len(ch) != 0 {
		t.Fatalf("after one read-only export, applying again would change %v", ch)
	}
	second, _ := export("second", time.Hour)
	looks(clientOf(second))

	// Revoke: every token of the ServiceAccount is refused at once.
	io, _, _, errb := ui.Test()
	io.Out = io.Err
	if err := access.Revoke(ctx, access.Options{IO: io, Admin: admin, What: "the box"}); err != nil {
		t.Fatalf("revoke: %v\n%s", err, errb.String())
	}
	for _, p := range []string{first, second} {
		waitRefused(t, clientOf(p), time.Now().Add(30*time.Second))
	}
	if _, found, _ := c.Get(ctx, kube.Ref{GVK: access.Objects()[1].GroupVersionKind(), Name: access.Name}); found {
		t.Fatal("revoke left the ClusterRoleBinding")
	}
	if err := access.Revoke(ctx, access.Options{IO: io, Admin: admin, What: "the box"}); err != nil {
		t.Fatalf("revoking again: %v", err)
	}

	// Expiry, for real: the shortest TTL the API server issues.
	short, _ := export("short", access.MinTTL)
	sc := clientOf(short)
	looks(sc)
	issued := time.Now()
	// Still good a little before the TTL ends.
	time.Sleep(access.MinTTL - time.Minute)
	if _, err := sc.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the read-only token was refused %s after it was issued, before its TTL of %s: %v", time.Since(issued).Round(time.Second), access.MinTTL, err)
	}
	waitRefused(t, sc, issued.Add(access.MinTTL+2*time.Minute+30*time.Second))
	t.Logf("the read-only token was refused %s after it was issued (TTL %s, plus the API server's minute of leeway)", time.Since(issued).Round(time.Second), access.MinTTL)
}

// waitRefused waits until the API server answers 401 to cs, failing at
// deadline. It polls because the API server caches a good token's
// authentication for a few seconds.
func waitRefused(t *testing.T, cs *kubernetes.Clientset, deadline time.Time) {
	t.Helper()
	for {
		_, err := cs.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{})
		if apierrors.IsUnauthorized(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the read-only token is still accepted (err %v)", err)
		}
		time.Sleep(2 * time.Second)
	}
}
