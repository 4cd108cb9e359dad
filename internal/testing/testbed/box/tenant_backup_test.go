package box_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/components"
)

// A tenant survives the loss of its management cluster: box A runs
// tenant1 (the real Kamaji and its provider, its DataStore a TLS etcd of
// the test bed), and a ConfigMap is written inside the tenant, which only
// the tenant's datastore keeps. 'labctl mgmt backup' (the command) takes
// it; box A stops for good, its datastore with it. Box B is a new
// management cluster with what 'mgmt install' puts there for tenants,
// and a new, empty datastore of its own (another CA). 'labctl mgmt
// restore' puts the file onto it. Kamaji on B then brings tenant1's
// control plane up again at the same endpoint: the kubeconfig written on
// A still reaches it (Kamaji kept the restored CA), and the ConfigMap is
// there (the keys came back under the tenant's prefix).
func TestTenantBackupRestoreOntoANewBox(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	e, etcdA := tenantBox(ctx, t, false)
	ct := createTenant(ctx, t, e, "tenant1", "proxmox")
	mark := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "backup-mark", Namespace: "default"}, Data: map[string]string{"written": "on box A, before the backup"}}
	if _, err := ct.wcs.CoreV1().ConfigMaps("default").Create(ctx, mark, metav1.CreateOptions{}); err != nil {
		t.Fatalf("writing a ConfigMap in tenant1: %v", err)
	}
	caA := secretData(ctx, t, e, "tenant1", ct.cpName+"-ca")
	prefix := "/" + ct.schema + "/"
	keysA, err := etcdA.Count(ctx, prefix)
	if err != nil || keysA == 0 {
		t.Fatalf("box A's datastore under %s: %d keys, %v", prefix, keysA, err)
	}
	t.Logf("box A: tenant1 up with %d keys under %s, %.0fs in", keysA, prefix, time.Since(start).Seconds())

	labFile := writeLab(t, e.lab)
	t.Setenv("LABCTL_BACKUP_PASSPHRASE", "correct horse battery staple")
	file := filepath.Join(t.TempDir(), "lab.age")
	code, out := labctl(t, "-c", labFile, "--kubeconfig", e.box.Env.Kubeconfig, "mgmt", "backup", file)
	if code != 0 || !strings.Contains(out, "tenants") {
		t.Fatalf("labctl mgmt backup: exit %d, want 0 and the tenants part\n%s", code, out)
	}
	t.Logf("labctl mgmt backup:\n%s", out)

	// The management VM is lost, and the datastore on it.
	e.box.StopControllers()

	b := &bootEnv{fake: e.fake, lab: e.lab, sim: e.sim}
	b.startBox(t, labShape{tenantPort: ct.port})
	etcdB := kamajiStack(ctx, t, b.box, b.kc, kamajiSetup{releases: []string{"kamaji-provider"}, dataStore: components.KamajiDataStore})
	b.box.Runner.ServeLoadBalancers(e.lab.Management.IP)
	applyStackPart(ctx, t, b, "tenant ClusterClasses", nil)
	applySharedRole(ctx, t, b)
	// A prefix holding another tenant's state is never overwritten.
	foreign := prefix + "configmaps/default/not-from-the-backup"
	if err := etcdB.Put(ctx, foreign, "another tenant's"); err != nil {
		t.Fatal(err)
	}
	code, out = labctl(t, "-c", labFile, "--kubeconfig", b.box.Env.Kubeconfig, "mgmt", "restore", "--timeout", "6m", file)
	if code == 0 || !strings.Contains(out, "already holds 1 key(s) under "+prefix) || !strings.Contains(out, "never overwrites") {
		t.Fatalf("labctl mgmt restore onto a datastore holding other keys under %s: exit %d, want a refusal:\n%s", prefix, code, out)
	}
	if err := etcdB.Delete(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	restoreStart := time.Now()
	code, out = labctl(t, "-c", labFile, "--kubeconfig", b.box.Env.Kubeconfig, "mgmt", "restore", "--timeout", "6m", file)
	if code != 0 {
		t.Fatalf("labctl mgmt restore: exit %d\n%s", code, out)
	}
	t.Logf("labctl mgmt restore (%.0fs):\n%s", time.Since(restoreStart).Seconds(), out)
	if !strings.Contains(out, "key(s) of tenant tenant1/"+ct.cpName+" under "+prefix) {
		t.Errorf("the restore does not say it put tenant1's keys back under %s:\n%s", prefix, out)
	}

	// The kubeconfig 'cluster create' wrote on A, unchanged: the same CA
	// and admin certificate, at the same endpoint.
	waitUntil(ctx, t, 5*time.Minute, "tenant1's API server on box B, with the ConfigMap written on A", func() {}, func() (bool, string) {
		cm, err := ct.wcs.CoreV1().ConfigMaps("default").Get(ctx, mark.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return cm.Data["written"] == mark.Data["written"], fmt.Sprint(cm.Data)
	})
	t.Logf("tenant1 serves from box B with its state, %.0fs after the restore began", time.Since(restoreStart).Seconds())
	if caB := secretData(ctx, t, b, "tenant1", ct.cpName+"-ca"); !bytes.Equal(caB["tls.crt"], caA["tls.crt"]) {
		t.Errorf("tenant1's CA on B is not the one of A: Kamaji made a new one")
	}
	if n, err := etcdB.Count(ctx, prefix); err != nil || n < keysA {
		t.Errorf("box B's datastore holds %d keys under %s (%v); box A's held %d", n, prefix, err, keysA)
	}

	// A second restore changes nothing: the tenant runs, its datastore
	// is kept as it is now.
	code, out = labctl(t, "-c", labFile, "--kubeconfig", b.box.Env.Kubeconfig, "mgmt", "restore", "--timeout", "6m", file)
	if code != 0 || !strings.Contains(out, "TenantControlPlane tenant1/"+ct.cpName+" runs on the target: its datastore is kept as it is") {
		t.Errorf("a second labctl mgmt restore: exit %d, want 0 and the datastore kept:\n%s", code, out)
	}
	t.Logf("the whole check: %.0fs", time.Since(start).Seconds())
}

// secretData reads a Secret of the box's management cluster.
func secretData(ctx context.Context, t *testing.T, e *bootEnv, ns, name string) map[string][]byte {
	t.Helper()
	var s corev1.Secret
	if err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		t.Fatalf("reading Secret %s/%s: %v", ns, name, err)
	}
	return s.Data
}
