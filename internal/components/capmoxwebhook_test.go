package components_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/upstream"
)

// CAPMOX's release webhooks, patched as the operator patches them from
// labctl's Provider CR: the machine template's validation, and only it,
// leaves out Cluster API's topology dry runs; every other webhook is as
// released. (The box's tenant upgrade shows the API server honouring it.)
func TestCAPMOXTemplateWebhookSkipsTopologyDryRuns(t *testing.T) {
	t.Setenv("PVE_TOKEN_SECRET", secret)
	lab := load(t, "../../examples/lab.yaml")
	cr := providerCR(t, capmoxOf(t, build(t, lab, components.Options{})))
	spec, _, _ := unstructured.NestedMap(cr.Object, "spec")
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	c, err := upstream.Get(t.Context(), root, "capmox")
	if err != nil {
		t.Fatal(err)
	}
	released, _, err := c.Webhooks()
	if err != nil {
		t.Fatal(err)
	}
	patched, _, err := c.WebhooksAsOperator(spec)
	if err != nil {
		t.Fatalf("the operator would fail on labctl's patches: %v", err)
	}
	found := false
	for i, v := range patched {
		if v.Name != components.CAPMOXValidatingWebhooks {
			t.Errorf("CAPMOX's release has ValidatingWebhookConfiguration %s, labctl's patch targets %s", v.Name, components.CAPMOXValidatingWebhooks)
			continue
		}
		for j, w := range v.Webhooks {
			if len(released[i].Webhooks[j].MatchConditions) != 0 {
				t.Fatalf("CAPMOX's release webhook %s has match conditions already: %v", w.Name, released[i].Webhooks[j].MatchConditions)
			}
			switch {
			case w.Name == "validation.proxmoxmachinetemplate.infrastructure.cluster.x-k8s.io":
				found = true
				if len(w.MatchConditions) != 1 || w.MatchConditions[0].Name != components.TopologyDryRunCondition {
					t.Errorf("the template webhook's match conditions: %v", w.MatchConditions)
				}
			case len(w.MatchConditions) != 0:
				t.Errorf("webhook %s got match conditions %v; only the template's may", w.Name, w.MatchConditions)
			}
		}
	}
	if !found {
		t.Error("no webhook of CAPMOX's release validates ProxmoxMachineTemplates")
	}
}
