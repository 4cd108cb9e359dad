package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/testing/sshtest"
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
