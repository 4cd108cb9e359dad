package testbed

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/testing/testbed/upstream"
)

// Labctl builds labctl from the checkout into the test's temporary folder,
// as its image's binary is built (CGO_ENABLED=0, -tags provider: with
// 'labctl provider libvirt'), and returns its path:
// what the runner runs for labctl's own image (runner.Labctl). go uses the
// module and build caches the test process started with, wherever the
// test points HOME.
func Labctl(t testing.TB) string {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "labctl")
	began := time.Now()
	cmd := exec.CommandContext(t.Context(), goBin, "build", "-tags", "provider", "-o", bin, ".")
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), upstream.GoEnv()...), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testbed: building labctl from %s: %v\n%s", root, err, out)
	}
	t.Logf("testbed: built labctl from %s in %s", root, time.Since(began).Round(time.Millisecond))
	return bin
}
