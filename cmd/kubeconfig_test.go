package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/labctl/labctl/internal/testing/sshtest"
	"github.com/labctl/labctl/internal/testing/testbed"
)

// userLab is the owner's lab with the SSH key a test made, in a state
// folder of the test's own and with no $KUBECONFIG.
func userLab(t *testing.T) string {
	t.Helper()
	pub, _ := sshtest.UserKey(t)
	data, err := os.ReadFile("../examples/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(data), "sshPublicKeyFile: ~/.ssh/id_ed25519.pub", "sshPublicKeyFile: "+pub, 1)
	path := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("KUBECONFIG", "")
	t.Setenv("LABCTL_KUBECONFIG", "")
	return path
}

// TestKubeconfigFlagNamesMissingFile is '--kubeconfig /nonexistent'.
func TestKubeconfigFlagNamesMissingFile(t *testing.T) {
	lab := userLab(t)
	code, _, errOut := run(t, "", "cluster", "list", "-c", lab, "--kubeconfig", "/nonexistent")
	if code != 1 || !strings.Contains(errOut, "kubeconfig /nonexistent does not exist") || strings.Contains(errOut, "mgmt up") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	t.Setenv("KUBECONFIG", "/also-missing")
	code, _, errOut = run(t, "", "cluster", "list", "-c", lab)
	if code != 1 || !strings.Contains(errOut, "$KUBECONFIG names /also-missing") {
		t.Errorf("KUBECONFIG ignored: exit %d, stderr %q", code, errOut)
	}
}

// TestCreateDryRunPointsOffline: without a management cluster, the dry run
// says why it needs one and that -o yaml renders without it.
func TestCreateDryRunPointsOffline(t *testing.T) {
	lab := userLab(t)
	code, _, errOut := run(t, "", "cluster", "create", "lab1", "--dry-run", "-c", lab)
	if code != 1 || !strings.Contains(errOut, "the dry run compares with the management cluster, so it needs one") ||
		!strings.Contains(errOut, "'labctl cluster create lab1 --dry-run -o yaml' prints the objects without one") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	code, out, errOut := run(t, "", "cluster", "create", "lab1", "--dry-run", "-o", "yaml", "-c", lab)
	if code != 0 || !strings.Contains(out, "kind: Cluster") {
		t.Errorf("-o yaml offline: exit %d, stderr %q", code, errOut)
	}
}

// TestWorkloadErrorsNameTheSecret: a workload cluster whose API server
// refuses, or accepts and never answers, is reported with where its
// kubeconfig came from (the Secret Cluster API keeps on the management
// cluster) and how to see whether it is up, not with client-go's bare
// "dial tcp" or "TLS handshake timeout".
func TestWorkloadErrorsNameTheSecret(t *testing.T) {
	lab := userLab(t)
	env := testbed.Start(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab1"}}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused, hung := testbed.ClosedAddr(t), testbed.StartSilent(t).Addr
	from := "(from kubeconfig Secret lab1/lab1-kubeconfig on the management cluster)"
	for _, tc := range []struct{ name, addr, want string }{
		{"refused", refused, "the API server at " + refused + " " + from + " cannot be reached: "},
		{"hung", hung, "the API server at " + hung + " " + from + " accepted the connection but did not answer TLS within 10s: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kc := "apiVersion: v1\nkind: Config\nclusters: [{name: lab1, cluster: {server: \"https://" + tc.addr + "\"}}]\n" +
				"users: [{name: admin, user: {token: x}}]\ncontexts: [{name: admin@lab1, context: {cluster: lab1, user: admin}}]\ncurrent-context: admin@lab1\n"
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "lab1", Name: "lab1-kubeconfig"}, Data: map[string][]byte{"value": []byte(kc)}}
			_ = cs.CoreV1().Secrets("lab1").Delete(t.Context(), secret.Name, metav1.DeleteOptions{})
			if _, err := cs.CoreV1().Secrets("lab1").Create(t.Context(), secret, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := run(t, "", "cluster", "kubeconfig", "lab1", "--read-only", "-c", lab, "--kubeconfig", env.Kubeconfig)
			if code != 1 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "(labctl cluster describe lab1)") {
				t.Errorf("exit %d, want 1 and %q with the fix (labctl cluster describe lab1):\n%s", code, tc.want, stderr)
			}
		})
	}
}
