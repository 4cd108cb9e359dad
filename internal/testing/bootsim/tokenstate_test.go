package bootsim

import (
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// TestTokenStateSaysWhatDiscoveryFound: a join that gave up names the
// cluster's bootstrap tokens, which of them cluster-info is signed for,
// and who holds kube-controller-manager's lease, so that a failure seen
// once in CI can be read from its log.
func TestTokenStateSaysWhatDiscoveryFound(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 12, 7, 18, 42, 40, 0, time.UTC))
	renewed := metav1.NewMicroTime(time.Date(2026, 12, 7, 18, 43, 28, 0, time.UTC))
	cs := fake.NewSimpleClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "bootstrap-token-s9d95q", CreationTimestamp: created},
			Type: corev1.SecretTypeBootstrapToken,
			Data: map[string][]byte{"token-id": []byte("s9d95q"), "expiration": []byte("2026-12-07T18:57:40Z"), "usage-bootstrap-signing": []byte("true")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "other"}, Data: map[string][]byte{"token-id": []byte("notatoken")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-public", Name: "cluster-info", ResourceVersion: "733"},
			Data: map[string]string{"kubeconfig": "...", "jws-kubeconfig-abcdef": "x..y"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-controller-manager"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("vm_ad754486"), RenewTime: &renewed}},
	)
	got := tokenState(t.Context(), cs)
	for _, want := range []string{
		"kube-system's bootstrap tokens: [s9d95q (expiration 2026-12-07T18:57:40Z, signing true, created 18:42:40)]",
		"cluster-info (resourceVersion 733) signed for [abcdef]",
		"kube-controller-manager's lease held by vm_ad754486, renewed 18:43:28",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("tokenState lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "notatoken") {
		t.Errorf("tokenState lists a Secret that is no bootstrap token:\n%s", got)
	}
}

// The failure names the bootstrapsigner's own lines of each machine's
// kube-controller-manager log, and only those.
func TestSignerLogIsTheSignersLines(t *testing.T) {
	log := t.TempDir() + "/kube-controller-manager.log"
	data := "I1207 20:56:44.1 1 leaderelection.go:272] \"Successfully acquired lease\"\n" +
		"I1207 20:56:45.2 1 bootstrapsigner.go:162] \"Starting\"\n" +
		"I1207 20:56:46.3 1 bootstrapsigner.go:260] \"Error updating ConfigMap\" err=\"conflict\"\n"
	if err := os.WriteFile(log, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	cp := &controlPlane{procs: []*proc{{name: "kube-apiserver", log: "/nonexistent"}, {name: "kube-controller-manager-v1.35.3", log: log}}}
	got := cp.signerLog(10)
	want := "I1207 20:56:45.2 1 bootstrapsigner.go:162] \"Starting\"\nI1207 20:56:46.3 1 bootstrapsigner.go:260] \"Error updating ConfigMap\" err=\"conflict\""
	if got != want {
		t.Errorf("signerLog = %q, want %q", got, want)
	}
}
