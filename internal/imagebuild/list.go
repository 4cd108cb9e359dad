package imagebuild

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/ui"
)

// ListOptions are the inputs of 'labctl image list'.
type ListOptions struct {
	IO     *ui.IO
	Lab    *config.Lab
	Output string
	// Driver opens the lab's hypervisor called name.
	Driver func(ctx context.Context, name string) (hypervisor.Driver, error)
}

// Template is one row of 'image list'.
type Template struct {
	Hypervisor string   `json:"hypervisor" yaml:"hypervisor"`
	Node       string   `json:"node" yaml:"node"`
	VMID       int      `json:"vmid" yaml:"vmid"`
	Name       string   `json:"name" yaml:"name"`
	Image      string   `json:"image,omitempty" yaml:"image,omitempty"`
	Kubernetes string   `json:"kubernetesVersion,omitempty" yaml:"kubernetesVersion,omitempty"`
	Tags       []string `json:"tags" yaml:"tags"`
}

// List prints the labctl-tagged templates of every Proxmox hypervisor,
// and the node image volumes of every libvirt host.
func List(ctx context.Context, o ListOptions) error {
	rows := []Template{}
	for _, h := range o.Lab.Hypervisors {
		ts, err := listHost(ctx, o, h.Name)
		if err != nil {
			return err
		}
		rows = append(rows, ts...)
	}
	return o.IO.Print(o.Output, rows, func(w io.Writer) error {
		if len(rows) == 0 {
			_, err := fmt.Fprintln(w, "no labctl templates; build one with 'labctl image build'")
			return err
		}
		table := make([][]string, 0, len(rows))
		for _, r := range rows {
			table = append(table, []string{r.Hypervisor, r.Node, strconv.Itoa(r.VMID), r.Name, r.Image, r.Kubernetes, strings.Join(r.Tags, ";")})
		}
		return o.IO.Table(w, []string{"HYPERVISOR", "NODE", "VMID", "NAME", "IMAGE", "KUBERNETES", "TAGS"}, table)
	})
}

// VolumeLister is a driver whose node images are volumes of a storage
// pool (libvirt).
type VolumeLister interface {
	VolumeNames(ctx context.Context) ([]string, error)
}

func listHost(ctx context.Context, o ListOptions, name string) ([]Template, error) {
	drv, err := o.Driver(ctx, name)
	if err != nil {
		return nil, err
	}
	defer func() { _ = drivers.Close(drv) }()
	if err := drivers.Reach(ctx, o.IO, drv); err != nil {
		return nil, err
	}
	return HostImages(ctx, o.Lab, drv)
}

// HostImages are the node images on the hypervisor drv drives: the
// templates tagged labctl on Proxmox, and on a libvirt host the volumes
// of its pool that are node images of lab.yaml's images ('image build'
// names them <image>-<version>.qcow2). 'labctl status' reads them through
// the driver it already holds.
func HostImages(ctx context.Context, lab *config.Lab, drv hypervisor.Driver) ([]Template, error) {
	name := drv.Name()
	if vl, ok := drv.(VolumeLister); ok {
		names, err := vl.VolumeNames(ctx)
		if err != nil {
			return nil, fmt.Errorf("hypervisor %s: %w", name, err)
		}
		var out []Template
		for _, img := range lab.Images {
			if !slices.Contains(img.Hosts, name) || !slices.Contains(names, img.VolumeName()) {
				continue
			}
			out = append(out, Template{Hypervisor: name, Name: img.VolumeName(), Image: img.Name, Kubernetes: img.KubernetesVersion, Tags: []string{}})
		}
		return out, nil
	}
	tm, ok := drv.(Templater)
	if !ok {
		return nil, nil
	}
	ts, err := tm.Templates(ctx)
	if err != nil {
		return nil, fmt.Errorf("hypervisor %s: %w", name, err)
	}
	out := make([]Template, 0, len(ts))
	for _, t := range ts {
		r := Template{Hypervisor: name, Node: t.Node, VMID: t.ID, Name: t.Name, Tags: t.Tags}
		for _, tag := range t.Tags {
			if v, ok := strings.CutPrefix(tag, "labctl-image-"); ok {
				r.Image = v
			} else if v, ok := strings.CutPrefix(tag, "kubernetes-"); ok {
				r.Kubernetes = v
			}
		}
		out = append(out, r)
	}
	return out, nil
}
