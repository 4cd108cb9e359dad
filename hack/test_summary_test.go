package hack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSummaryShowsTheFailureNotTheDumpedLogs: CI shows only the end of
// make test's output, so the summary must hold the failing test's own
// message and leave out the process logs a failing box test dumps.
func TestSummaryShowsTheFailureNotTheDumpedLogs(t *testing.T) {
	log := filepath.Join(t.TempDir(), "make-test.log")
	out := `ok  	github.com/labctl/labctl/internal/a	1.0s
--- FAIL: TestRealVMMachineDeployment (612.40s)
    realvm_test.go:103: testbed: kube-apiserver and etcd ready
    realvm_test.go:280: the second machine provisioned: timed out after 5m0s
    box.go:407: box: kube-controller-manager's log (/tmp/x/kcm.log), last lines:
        E1207 19:01:01.252116    1638 garbagecollector.go:363] "error syncing item"
FAIL
FAIL	github.com/labctl/labctl/internal/provider/libvirt/controller	2144.676s
panic: test timed out after 45m0s
	running tests:
		TestLab1ClusterCreate (44m58s)
ok  	github.com/labctl/labctl/internal/b	1.0s
`
	if err := os.WriteFile(log, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command("./test-summary.sh", log).CombinedOutput()
	if err != nil {
		t.Fatalf("test-summary.sh: %v\n%s", err, got)
	}
	for _, want := range []string{
		"--- FAIL: TestRealVMMachineDeployment (612.40s)",
		"realvm_test.go:280: the second machine provisioned: timed out after 5m0s",
		"FAIL\tgithub.com/labctl/labctl/internal/provider/libvirt/controller",
		"panic: test timed out after 45m0s",
		"TestLab1ClusterCreate (44m58s)",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("the summary lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"garbagecollector.go", "internal/a\t", "internal/b\t"} {
		if strings.Contains(string(got), unwanted) {
			t.Errorf("the summary holds %q:\n%s", unwanted, got)
		}
	}
}
