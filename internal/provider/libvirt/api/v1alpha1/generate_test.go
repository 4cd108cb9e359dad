package v1alpha1_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/testing/testbed"
)

// The deepcopy code and the embedded CRDs are generated from these types;
// a type changed without 'make generate' must not get through.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(root, "hack", "generate.sh"), "check")
	cmd.Env = append(cmd.Environ(), "CONTROLLER_GEN_BIN="+filepath.Join(t.TempDir(), "controller-gen"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/generate.sh check: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "up to date") {
		t.Fatalf("hack/generate.sh check said:\n%s", out)
	}
}
