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

// DevBuildWarning says, when comps install the libvirt provider at
// release.DevVersion, that no release publishes its image: a labctl built
// from source would otherwise install a Deployment whose pods never pull,
// and the user would learn it only from the operator's wait timing out.
// It is empty when there is nothing to warn about.
func DevBuildWarning(comps []Component, pins versions.Pins) string {
	for _, c := range comps {
		if c.Provider == nil || c.Provider.Name != "libvirt" || c.Provider.Version != release.DevVersion {
			continue
		}
		return fmt.Sprintf("this labctl is a development build (version %q), so the libvirt provider is installed as %s, and no release publishes %s: "+
			"its pods start only if that image is already in the management VM's containerd (k3s ctr images import); otherwise use a released labctl",
			versions.Version, release.DevVersion, release.Image(pins.LibvirtProvider, release.DevVersion))
	}
	return ""
}
