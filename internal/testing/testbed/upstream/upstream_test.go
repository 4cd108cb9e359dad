package upstream_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/testing/testbed"
	. "github.com/labctl/labctl/internal/testing/testbed/upstream"
	"github.com/labctl/labctl/internal/versions"
)

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// The test bed must run what labctl pins; where it cannot, the one
// documented exception (TestbedVersions) says which version runs instead.
func TestWrappersSelectThePins(t *testing.T) {
	root := moduleRoot(t)
	pins := versions.MustGet()
	for _, name := range Names() {
		p := Providers[name]
		m, err := Locate(context.Background(), root, p)
		if err != nil {
			t.Fatal(err)
		}
		want := p.Pin(pins)
		if v, ok := TestbedVersions[p.Module]; ok {
			want = v
		}
		if m.Version != want {
			t.Errorf("%s: the test bed selects %s %s, want %s (embedded/versions.yaml pins %s)", name, m.Path, m.Version, want, p.Pin(pins))
		}
		if !strings.HasPrefix(filepath.Base(m.Dir), filepath.Base(p.Module)+"@") {
			t.Errorf("%s: module folder %s is not %s's", name, m.Dir, p.Module)
		}
	}
}

// The contract labels are what the Cluster controller looks up on a
// provider's CRDs; the bases in config/crd/bases lack them.
func TestRenderedCRDsCarryContractLabels(t *testing.T) {
	root := moduleRoot(t)
	want := map[string]struct {
		crd, label, value string
	}{
		"capmox":                {"proxmoxclusters.infrastructure.cluster.x-k8s.io", "cluster.x-k8s.io/v1beta2", "v1alpha2"},
		"kubeadm-bootstrap":     {"kubeadmconfigs.bootstrap.cluster.x-k8s.io", "cluster.x-k8s.io/v1beta2", "v1beta2"},
		"kubeadm-control-plane": {"kubeadmcontrolplanes.controlplane.cluster.x-k8s.io", "cluster.x-k8s.io/v1beta2", "v1beta2"},
		"cluster-api":           {"clusters.cluster.x-k8s.io", "cluster.x-k8s.io/provider", "cluster-api"},
		// v1.0.3 sets no contract label on its pools; clusterctl's labels it has.
		"ipam-in-cluster":      {"inclusterippools.ipam.cluster.x-k8s.io", "cluster.x-k8s.io/provider", "ipam-in-cluster"},
		"cluster-api-operator": {"coreproviders.operator.cluster.x-k8s.io", "", ""},
		"helm-controller":      {"helmcharts.helm.cattle.io", "", ""},
	}
	for name, w := range want {
		c, err := Get(context.Background(), root, name)
		if err != nil {
			t.Fatal(err)
		}
		crds, err := c.CRDs()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, crd := range crds {
			if crd.Name != w.crd {
				continue
			}
			found = true
			if w.label != "" && crd.Labels[w.label] != w.value {
				t.Errorf("%s: CRD %s label %s = %q, want %q (labels %v)", name, crd.Name, w.label, crd.Labels[w.label], w.value, crd.Labels)
			}
		}
		if !found {
			var names []string
			for _, crd := range crds {
				names = append(names, crd.Name)
			}
			t.Errorf("%s: no CRD %s among %v", name, w.crd, names)
		}
	}
}

// The webhook configurations are the release's, pointing at the provider's
// webhook Service in its namespace, with cert-manager's CA injection asked.
func TestRenderedWebhooks(t *testing.T) {
	c, err := Get(context.Background(), moduleRoot(t), "cluster-api")
	if err != nil {
		t.Fatal(err)
	}
	vs, ms, err := c.Webhooks()
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || len(ms) != 1 {
		t.Fatalf("cluster-api: %d validating and %d mutating webhook configurations, want 1 and 1", len(vs), len(ms))
	}
	var mdDefault bool
	for _, w := range ms[0].Webhooks {
		if w.Name == "default.machinedeployment.cluster.x-k8s.io" {
			mdDefault = true
		}
		svc := w.ClientConfig.Service
		if svc == nil || svc.Namespace != "capi-system" || svc.Name != "capi-webhook-service" {
			t.Errorf("webhook %s: service %+v, want capi-system/capi-webhook-service", w.Name, svc)
		}
	}
	if !mdDefault {
		t.Error("no MachineDeployment defaulting webhook: the MachineDeployment controller needs it")
	}
	if got := ms[0].Annotations["cert-manager.io/inject-ca-from"]; got != "capi-system/capi-serving-cert" {
		t.Errorf("inject-ca-from = %q", got)
	}
}

func TestUnknownProvider(t *testing.T) {
	_, err := Get(context.Background(), moduleRoot(t), "nope")
	if err == nil || !strings.Contains(err.Error(), `unknown upstream provider "nope" (known: `) {
		t.Fatalf("err = %v", err)
	}
}

func TestMissingWrapper(t *testing.T) {
	_, err := Locate(context.Background(), t.TempDir(), Providers["capmox"])
	if err == nil || !strings.Contains(err.Error(), "test bed wrapper module") {
		t.Fatalf("err = %v", err)
	}
}
