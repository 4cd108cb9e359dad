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
	return buildLabctl(t, "")
}

// LabctlAt is Labctl with labctl's version set to version, as a release
// build sets it (-X .../internal/versions.Version, the Makefile's and
// goreleaser's ldflag): two calls with different versions are two
// releases of labctl, whose provider images are tagged with them
// (release.Version).
func LabctlAt(t testing.TB, version string) string {
	t.Helper()
	return buildLabctl(t, version)
}

func buildLabctl(t testing.TB, version string) string {
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
	args := []string{"build", "-tags", "provider"}
	if version != "" {
		args = append(args, "-ldflags", "-X github.com/labctl/labctl/internal/versions.Version="+version)
	}
	began := time.Now()
	cmd := exec.CommandContext(t.Context(), goBin, append(args, "-o", bin, ".")...)
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), upstream.GoEnv()...), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testbed: building labctl %s from %s: %v\n%s", version, root, err, out)
	}
	t.Logf("testbed: built labctl %s from %s in %s", version, root, time.Since(began).Round(time.Millisecond))
	return bin
}
