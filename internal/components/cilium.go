package components

import (
	"fmt"

	"github.com/labctl/labctl/embedded"
	"github.com/labctl/labctl/internal/versions"
)

// CiliumChartFile is the embedded path of Cilium's chart at the pin:
// install/kubernetes/cilium of github.com/cilium/cilium at v<cilium>,
// the folder Cilium's release packages as the chart of that version.
// Carried so that 'cluster create', and a tenant's printed manifest,
// need no chart repository.
func CiliumChartFile(p versions.Pins) string {
	return embeddedUpstream + "/cilium-" + p.Cilium + ".tgz"
}

// CiliumChart is the embedded archive of Cilium's chart at the pin.
func CiliumChart(p versions.Pins) ([]byte, error) {
	data, err := embedded.FS.ReadFile(CiliumChartFile(p))
	if err != nil {
		return nil, fmt.Errorf("reading the Cilium chart this labctl carries: %w", err)
	}
	return data, nil
}
