package testbed

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStartWritesPrivateKubeconfig(t *testing.T) {
	env := Start(t)
	fi, err := os.Stat(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("kubeconfig mode = %o, want 600", perm)
	}
	data, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), strings.TrimSuffix(env.Config.Host, "/")) {
		t.Errorf("kubeconfig does not name the server %s", env.Config.Host)
	}
	if err := env.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	waitClosed(t, env.Config.Host)
	if err := env.Stop(); err != nil { // a second Stop, as Cleanup does, is harmless
		t.Fatalf("second Stop: %v", err)
	}
}

// A start that fails after the servers came up (here: a broken CRD file)
// must stop them, or kube-apiserver and etcd outlive the test.
func TestFailedStartStopsServers(t *testing.T) {
	assets := Assets(t)
	bad := filepath.Join(t.TempDir(), "bad-crd.yaml")
	const crd = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: other.example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
`
	if err := os.WriteFile(bad, []byte(crd), 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := start(assets, nil, []string{bad}, auditFiles{}, false)
	if err == nil {
		_ = env.Stop()
		t.Fatal("start with an invalid CRD succeeded")
	}
	t.Logf("start failed as expected: %v", err)
	if env == nil || env.env.ControlPlane.APIServer == nil || env.env.ControlPlane.APIServer.SecureServing.ListenAddr.Port == "" {
		t.Fatal("no API server was launched; the test proves nothing")
	}
	ls := env.env.ControlPlane.APIServer.SecureServing.ListenAddr
	waitClosed(t, "https://"+net.JoinHostPort(ls.Address, ls.Port))
	if etcd := env.env.ControlPlane.Etcd; etcd.URL != nil {
		waitClosed(t, etcd.URL.String())
	}
}

func TestMissingAssetsSkipOrFail(t *testing.T) {
	t.Setenv(EnvAssets, t.TempDir())
	_, err := findAssets()
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver, etcd, kubectl missing in") {
		t.Fatalf("findAssets in an empty folder: %v", err)
	}
}

// Every rendered set yields CRDs, and the Cluster API sets carry the
// contract labels the Cluster controller needs (the shared bases had none).
func TestCRDSetsRender(t *testing.T) {
	for name, providers := range crdSets {
		for _, p := range providers {
			crds, err := UpstreamCRDs(p)
			if err != nil {
				t.Fatalf("CRD set %s: %v", name, err)
			}
			if len(crds) == 0 {
				t.Errorf("CRD set %s: provider %s rendered no CRDs", name, p)
			}
		}
	}
	kamaji, err := UpstreamCRDs("kamaji-provider")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, crd := range kamaji {
		names = append(names, crd.Name)
	}
	if want := "kamajicontrolplanes.controlplane.cluster.x-k8s.io"; !slices.Contains(names, want) {
		t.Errorf("CRD set kamaji: %v, want %s among them", names, want)
	}
	crds, err := UpstreamCRDs("capmox")
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range crds {
		if got := crd.Labels["cluster.x-k8s.io/v1beta2"]; got != "v1alpha2" {
			t.Errorf("CAPMOX CRD %s: contract label cluster.x-k8s.io/v1beta2 = %q, want v1alpha2", crd.Name, got)
		}
	}
}

// A test asking for CAPI and CAPMOX gets their rendered CRDs installed and
// served, labels included, with no shared CRDs folder.
func TestStartInstallsRenderedCRDs(t *testing.T) {
	env := Start(t, WithCRDs("capi", "capmox"))
	names := map[string]map[string]string{}
	for _, crd := range env.CRDs {
		names[crd.Name] = crd.Labels
	}
	for _, want := range []string{"clusters.cluster.x-k8s.io", "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io", "proxmoxmachinetemplates.infrastructure.cluster.x-k8s.io"} {
		if _, ok := names[want]; !ok {
			t.Errorf("CRD %s not installed", want)
		}
	}
	if got := names["proxmoxclusters.infrastructure.cluster.x-k8s.io"]["cluster.x-k8s.io/v1beta2"]; got != "v1alpha2" {
		t.Errorf("installed ProxmoxCluster CRD contract label = %q, want v1alpha2", got)
	}
}

// waitClosed waits until nothing listens at the URL's host:port.
func waitClosed(t *testing.T, rawURL string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", u.Host, time.Second)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("%s still listens after Stop: the server leaked", u.Host)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
