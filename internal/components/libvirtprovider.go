package components

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/provider/libvirt/release"
	"github.com/labctl/labctl/internal/versions"
)

// libvirtDef is the operator's InfrastructureProvider libvirt: labctl's
// own provider at version (release.Version of labctl's), whose components
// come from the binary, never from a folder or a URL.
func libvirtDef(pin versions.Image, version string) providerDef {
	d := providerDef{kind: "InfrastructureProvider", ctype: "infrastructure", name: "libvirt", namespace: release.Namespace, version: version}
	d.release = func() ([]byte, []byte, error) {
		comps, err := release.Components(release.Image(pin, version), pin.Platforms)
		if err != nil {
			return nil, nil, err
		}
		meta, err := release.Metadata(version)
		if err != nil {
			return nil, nil, err
		}
		return comps, meta, nil
	}
	return d
}

// embedded packs the release the binary carries into the offline ConfigMap.
func (d providerDef) embedded() (*unstructured.Unstructured, error) {
	comps, meta, err := d.release()
	if err != nil {
		return nil, err
	}
	cm, err := d.packConfigMap(comps, meta)
	if err != nil {
		return nil, fmt.Errorf("the %s %s provider's ConfigMap: %w", d.ctype, d.name, err)
	}
	return cm, nil
}
