package testbed

import (
	"os"
	"path/filepath"
	"testing"
)

// EnvShared overrides where ../shared (the local mirror of upstream
// sources beside the checkout) is, as hack/testenv.sh reads it.
const EnvShared = "LABCTL_SHARED"

// UpstreamSource returns the folder of an upstream source the module proxy
// does not serve, by its name in hack/testbed/sources (e.g.
// "kamaji-e51909f"): .testbed/src/NAME, where the test bed's build puts
// it, else NAME in the local mirror ../shared/upstream (LABCTL_SHARED).
// Where neither is there the test is skipped, or fails when Required.
func UpstreamSource(t testing.TB, name string) string {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	shared := os.Getenv(EnvShared)
	if shared == "" {
		shared = filepath.Join(filepath.Dir(root), "shared")
	}
	tried := []string{filepath.Join(root, ".testbed", "src", name), filepath.Join(shared, "upstream", name)}
	for _, dir := range tried {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir
		}
	}
	msg := "testbed: the upstream source " + name + " is in neither " + tried[0] + " nor " + tried[1] +
		"; build the test bed (make test) or set " + EnvShared + " to the folder holding upstream/" + name
	if Required() {
		t.Fatalf("%s [not skipped: CI or %s is set]", msg, EnvRequire)
	}
	t.Skip(msg)
	return ""
}
