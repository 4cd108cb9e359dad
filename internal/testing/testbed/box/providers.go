package box

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/testing/testbed"
)

// capmoxArgs are the flags of CAPMOX's manager (cmd/main.go in
// github.com/ionos-cloud/cluster-api-provider-proxmox v0.9.0:
// initFlagsAndEnv, plus Cluster API's util/flags for diagnostics). It has
// no webhook port or certificate flag: main.go hard-codes port 9443 and
// leaves CertDir to controller-runtime's default, os.TempDir()/
// k8s-webhook-server/serving-certs (v0.22.5, pkg/webhook/server.go), so
// the box serves it on 9443 (fixedWebhookPort) and points TMPDIR at the
// certificate (managerEnv). --kubeconfig is controller-runtime's flag,
// which main.go adds to its pflag set from the Go flag set.
func capmoxArgs(_, healthPort, diagPort int, _, kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(healthPort),
		"--diagnostics-address=127.0.0.1:" + strconv.Itoa(diagPort),
		"--insecure-diagnostics",
	}
}

// ipamArgs are the flags of the in-cluster IPAM manager (main.go in
// sigs.k8s.io/cluster-api-ipam-provider-in-cluster v1.0.3). Its metrics
// server takes the box's diagnostics port.
func ipamArgs(webhookPort, healthPort, diagPort int, certDir, kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--webhook-port=" + strconv.Itoa(webhookPort),
		"--webhook-cert-dir=" + certDir,
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(healthPort),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(diagPort),
	}
}

// fixedWebhookPort are the managers whose webhook port cannot be chosen.
var fixedWebhookPort = map[string]int{
	// CAPMOX v0.9.0 cmd/main.go: ctrlwebhook.Options{Port: 9443}.
	"capmox": 9443,
}

// managerEnv is the environment a manager needs beside its flags, given
// the box's folder (which holds tls.crt and tls.key).
func managerEnv(name, dir string) ([]string, error) {
	if name != "capmox" {
		return nil, nil
	}
	// controller-runtime's default CertDir under os.TempDir(), which Go
	// reads from TMPDIR: a folder of CAPMOX's own with the box's
	// certificate where the webhook server looks.
	tmp := filepath.Join(dir, "capmox-tmp")
	certs := filepath.Join(tmp, "k8s-webhook-server", "serving-certs")
	if err := os.MkdirAll(certs, 0o700); err != nil {
		return nil, fmt.Errorf("making CAPMOX's certificate folder: %w", err)
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, fmt.Errorf("copying the webhook certificate for CAPMOX: %w", err)
		}
		if err := os.WriteFile(filepath.Join(certs, f), data, 0o600); err != nil {
			return nil, fmt.Errorf("copying the webhook certificate for CAPMOX: %w", err)
		}
	}
	return []string{"TMPDIR=" + tmp}, nil
}

func wired() []string {
	names := make([]string, 0, len(managerArgs))
	for n := range managerArgs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// holdPort takes a machine-wide lock on a fixed webhook port until the
// test ends, so two boxes on one machine (parallel test packages, other
// users' test runs) wait for each other instead of failing on the bind.
// It fails the test when the port stays taken by something else. The
// lock can be released earlier by the function it returns.
func holdPort(t testing.TB, name string, port int) func() {
	t.Helper()
	var release func()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		unlock, ok, err := testbed.TryLockPort(port)
		if err != nil {
			t.Fatalf("box: %s: %v", name, err)
		}
		if ok {
			var once sync.Once
			release = func() { once.Do(unlock) }
			t.Cleanup(release)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("box: port %d for %s is still locked by another test after 5 minutes", port, name)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("box: waiting for port %d for %s: %v", port, name, t.Context().Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	// The manager binds every interface; so does this check.
	for {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
		if err == nil {
			l.Close()
			return release
		}
		if time.Now().After(deadline) {
			t.Fatalf("box: %s needs port %d (hard-coded upstream) and it is taken: %v", name, port, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
