package components

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/provider/libvirt/release"
)

// LibvirtProviderConfigMap is the offline ConfigMap of labctl's own
// libvirt provider at version, its components made from the binary
// itself (package release) with the manager's image: what the
// InfrastructureProvider libvirt's spec.fetchConfig.selector finds. mgmt
// install does not use it yet (issue 16, item 3).
func LibvirtProviderConfigMap(version, image string) (*unstructured.Unstructured, error) {
	d := libvirtDef(version, "")
	comps, err := release.Components(image)
	if err != nil {
		return nil, err
	}
	meta, err := release.Metadata(version)
	if err != nil {
		return nil, err
	}
	cm, err := d.packConfigMap(comps, meta)
	if err != nil {
		return nil, fmt.Errorf("the libvirt provider's offline ConfigMap: %w", err)
	}
	return cm, nil
}

// libvirtDef is the operator's InfrastructureProvider libvirt.
func libvirtDef(version, fetchURL string) providerDef {
	return providerDef{kind: "InfrastructureProvider", ctype: "infrastructure", name: "libvirt", namespace: release.Namespace,
		version: version, fetchURL: fetchURL}
}
