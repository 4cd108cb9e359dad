package config

import (
	"fmt"
	"strings"
)

// Cluster is the cluster called name. The error names the clusters the lab
// has, so a typo shows its fix.
func (l *Lab) Cluster(name string) (*Cluster, error) {
	return find(l.Clusters, func(c *Cluster) string { return c.Name }, "cluster", "clusters", name)
}

// Hypervisor is the hypervisor called name. The error names the hypervisors
// the lab has.
func (l *Lab) Hypervisor(name string) (*Hypervisor, error) {
	return find(l.Hypervisors, func(h *Hypervisor) string { return h.Name }, "hypervisor", "hypervisors", name)
}

// Image is the node image called name. The error names the images the lab
// has.
func (l *Lab) Image(name string) (*Image, error) {
	return find(l.Images, func(i *Image) string { return i.Name }, "image", "images", name)
}

// find is the lookup by name of one list of lab.yaml; what is one item of
// it, list its field.
func find[T any](items []T, nameOf func(*T) string, what, list, name string) (*T, error) {
	have := make([]string, 0, len(items))
	for i := range items {
		if nameOf(&items[i]) == name {
			return &items[i], nil
		}
		have = append(have, nameOf(&items[i]))
	}
	if len(have) == 0 {
		return nil, fmt.Errorf("%s %q: the lab config defines no %s; add one under %s", what, name, list, list)
	}
	return nil, fmt.Errorf("%s %q is not in the lab config; it has: %s", what, name, strings.Join(have, ", "))
}

// NodeVolume is the node image volume a template on libvirt hosts boots
// from: template.volume, or the volume 'image build' uploads the libvirt
// image template.image names as. Validation has checked the image.
func (l *Lab) NodeVolume(t Template) string {
	if t.Volume != "" || t.Image == "" {
		return t.Volume
	}
	if img, err := l.Image(t.Image); err == nil {
		return img.VolumeName()
	}
	return ""
}
