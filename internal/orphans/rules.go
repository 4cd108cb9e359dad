package orphans

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
)

// clusterAPITag marks the domains labctl's libvirt provider makes.
const clusterAPITag = "cluster-api"

// classify applies the rules to what hypervisor h holds.
func classify(lab *config.Lab, h *config.Hypervisor, s *hostState, own *owners) []Orphan {
	var out []Orphan
	mgmtSeen := managementSeen(lab, h, s.vms)
	for _, v := range s.vms {
		var o *Orphan
		switch {
		case v.Template:
			o = template(lab, h, v, s.vms, own)
		case v.Lab == lab.Metadata.Name:
			o = labVM(lab, h, v, mgmtSeen)
		case h.Proxmox != nil:
			o = clone(h, v, own)
		default:
			o = domain(lab, v, own)
		}
		if o != nil {
			o.Hypervisor, o.Name, o.Node, o.ID, o.Running, o.vm = h.Name, v.Name, v.Node, v.ID, v.Running, v
			if o.Kind == KindVM {
				o.MemoryMiB = v.MemoryMiB
				o.Reason += power(v)
			}
			out = append(out, *o)
		}
	}
	for _, v := range s.vols {
		o := volume(v, own)
		if v.Kind == hypervisor.VolumeImage {
			o = nodeImage(lab, h, v, s.vols, own)
		}
		if o != nil {
			o.Hypervisor, o.Name, o.Node, o.vol = h.Name, v.Name, v.Node, v
			out = append(out, *o)
		}
	}
	return out
}

// power says what a VM costs while it stays: CAPMOX counts the memory of
// stopped VMs too.
func power(v hypervisor.VM) string {
	switch {
	case v.Running:
		return fmt.Sprintf("; running, %d MiB", v.MemoryMiB)
	case v.Node != "":
		return fmt.Sprintf("; stopped, CAPMOX still counts its %d MiB against node %s", v.MemoryMiB, v.Node)
	}
	return fmt.Sprintf("; stopped, %d MiB", v.MemoryMiB)
}

// isManagement reports whether v is the management VM lab.yaml names.
func isManagement(lab *config.Lab, h *config.Hypervisor, v hypervisor.VM) bool {
	m := lab.Management
	return m.Hypervisor == h.Name && v.Name == m.Name && (m.VMID == 0 || v.ID == 0 || v.ID == m.VMID)
}

func managementSeen(lab *config.Lab, h *config.Hypervisor, vms []hypervisor.VM) bool {
	return slices.ContainsFunc(vms, func(v hypervisor.VM) bool { return isManagement(lab, h, v) })
}

// labVM: a VM labctl itself made for this lab (lab tag or metadata) is
// the management VM; another one is an old one (a renamed or re-made
// management VM). While lab.yaml's management VM is not there, one of
// them may be it under an old name, so none is offered.
func labVM(lab *config.Lab, h *config.Hypervisor, v hypervisor.VM, mgmtSeen bool) *Orphan {
	if isManagement(lab, h, v) || !mgmtSeen || !slices.Contains(v.Tags, hypervisor.Tag) {
		return nil
	}
	return &Orphan{Kind: KindVM, Reason: fmt.Sprintf("tagged %s by labctl, but not the management VM %s that lab.yaml names (management.name)",
		hypervisor.LabTag(lab.Metadata.Name), lab.Management.Name)}
}

// clone: a VM CAPMOX cloned from a labctl template carries the template's
// tags and no lab tag, so it is this lab's by its VMID in the lab's
// vmidRange; it is owned while a ProxmoxMachine names its VMID or its
// name.
func clone(h *config.Hypervisor, v hypervisor.VM, own *owners) *Orphan {
	r := h.Proxmox.VMIDRange
	img := imageOf(v.Tags)
	if !own.present || r == nil || img == "" || !slices.Contains(v.Tags, hypervisor.Tag) || v.Lab != "" ||
		v.ID < r.Start || v.ID > r.End || own.vmids[v.ID] != "" || own.names[v.Name] != "" {
		return nil
	}
	return &Orphan{Kind: KindVM, clone: true, Reason: fmt.Sprintf("tagged %s, VMID %d in vmidRange %d-%d, no ProxmoxMachine names it",
		hypervisor.ImageTag(img), v.ID, r.Start, r.End)}
}

// domain: a KVM node's domain carries the lab <namespace>/<cluster> of a
// cluster of this lab; it is owned while a LibvirtMachine has its UUID
// (as UID or in spec.providerID) or its name.
func domain(lab *config.Lab, v hypervisor.VM, own *owners) *Orphan {
	ns, cluster, ok := strings.Cut(v.Lab, "/")
	if !own.present || !ok || !slices.Contains(v.Tags, clusterAPITag) || !slices.Contains(v.Tags, hypervisor.Tag) {
		return nil
	}
	ours := own.clusters[v.Lab] || slices.ContainsFunc(lab.Clusters, func(c config.Cluster) bool {
		return c.Name == cluster && clusterapi.Namespace(c.Name) == ns
	})
	if !ours || own.uuids[strings.ToLower(v.UUID)] != "" || own.names[v.Name] != "" {
		return nil
	}
	return &Orphan{Kind: KindVM, Reason: fmt.Sprintf("KVM node of cluster %s (lab %s's), domain UUID %s, no LibvirtMachine names it",
		v.Lab, lab.Metadata.Name, v.UUID)}
}

// volume: a disk or seed labctl's names mark that no VM uses.
func volume(v hypervisor.Volume, own *owners) *Orphan {
	if v.UsedBy != "" || own.names[v.VM] != "" {
		// A LibvirtMachine of that name may be making its domain: the
		// volumes come before the domain is defined.
		return nil
	}
	var why string
	switch {
	case v.Kind == hypervisor.VolumeSeed && v.Node != "":
		why = fmt.Sprintf("cloud-init seed labctl uploaded for VM %s, attached to no VM", v.VM)
	case v.Kind == hypervisor.VolumeDisk && v.VMID != 0:
		why = fmt.Sprintf("disk of VMID %d, in the lab's vmidRange, which no VM has", v.VMID)
	default:
		why = fmt.Sprintf("%s labctl made for VM %s, and no domain of that name exists", kindText(v.Kind), v.VM)
	}
	return &Orphan{Kind: v.Kind, Reason: why + sizeText(v.Bytes)}
}

func kindText(kind string) string {
	if kind == hypervisor.VolumeSeed {
		return "cloud-init seed"
	}
	return "disk"
}

func sizeText(b int64) string {
	if b <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%d MiB)", b>>20)
}

// template: a template 'labctl image build' made for one of this lab's
// images on h, that no cluster's templates select (lab.yaml's, and the
// management cluster's ProxmoxMachines and ProxmoxMachineTemplates) and
// that is not the newest of its image (by its kubernetes-<version> tag).
func template(lab *config.Lab, h *config.Hypervisor, v hypervisor.VM, all []hypervisor.VM, own *owners) *Orphan {
	img := imageOf(v.Tags)
	if !own.present || img == "" || !slices.Contains(v.Tags, hypervisor.Tag) ||
		!slices.ContainsFunc(lab.Images, func(i config.Image) bool { return i.Name == img && i.Hypervisor == h.Name }) {
		return nil
	}
	if own.templateIDs[v.ID] != "" || slices.ContainsFunc(own.selectors, func(tags []string) bool { return subset(tags, v.Tags) }) {
		return nil
	}
	if slices.ContainsFunc(labTemplates(lab), func(t config.Template) bool {
		want, err := lab.Image(t.Image)
		return t.TemplateID == v.ID || (err == nil && subset(want.TemplateTags(), v.Tags))
	}) {
		return nil
	}
	newest := v
	for _, t := range all {
		if t.Template && imageOf(t.Tags) == img && slices.Contains(t.Tags, hypervisor.Tag) && newer(t, newest) {
			newest = t
		}
	}
	if newest.ID == v.ID {
		return nil
	}
	return &Orphan{Kind: KindTemplate, Reason: fmt.Sprintf("template of image %s (kubernetes %s) no cluster's templates select; %s (VMID %d, kubernetes %s) is newer",
		img, kubeOf(v.Tags), newest.Name, newest.ID, kubeOf(newest.Tags))}
}

// labTemplates are the templates lab.yaml's clusters make VMs from: each
// cluster's and each of its pools'.
func labTemplates(lab *config.Lab) []config.Template {
	var ts []config.Template
	for i := range lab.Clusters {
		c := &lab.Clusters[i]
		ts = append(ts, c.Template)
		for _, p := range c.Pools {
			ts = append(ts, c.PoolTemplate(p))
		}
	}
	return ts
}

// nodeImage: a node image volume 'labctl image build' uploaded to h for
// one of this lab's images (<image>-<kubernetesVersion>.qcow2, with its
// verified-upload marker), that no disk is an overlay on, that no
// LibvirtMachine, LibvirtMachineTemplate or lab.yaml cluster names, and
// that is not the newest of its image in the pool.
func nodeImage(lab *config.Lab, h *config.Hypervisor, v hypervisor.Volume, all []hypervisor.Volume, own *owners) *Orphan {
	img, kube := nodeImageOf(lab, h, v)
	if !own.present || img == "" || v.UsedBy != "" || own.images[v.Storage+"/"+v.Name] != "" {
		return nil
	}
	if slices.ContainsFunc(labTemplates(lab), func(t config.Template) bool { return lab.NodeVolume(t) == v.Name }) {
		return nil
	}
	newest, newestKube := v, kube
	for _, w := range all {
		if w.Kind != hypervisor.VolumeImage {
			continue
		}
		if wi, wk := nodeImageOf(lab, h, w); wi == img && newerVersion(wk, newestKube) {
			newest, newestKube = w, wk
		}
	}
	if newest.Name == v.Name {
		return nil
	}
	return &Orphan{Kind: KindImage, Reason: fmt.Sprintf("node image of image %s (kubernetes %s) 'labctl image build' uploaded; no disk is an overlay on it, no LibvirtMachine, LibvirtMachineTemplate or cluster in lab.yaml uses it, and %s is newer",
		img, kube, newest.Name) + sizeText(v.Bytes)}
}

// nodeImageOf splits a node image volume's name into the lab.yaml image
// it was built from, for host h, and its Kubernetes version; "" when it
// is none of them.
func nodeImageOf(lab *config.Lab, h *config.Hypervisor, v hypervisor.Volume) (img, kube string) {
	base, ok := strings.CutSuffix(v.Name, ".qcow2")
	if !ok {
		return "", ""
	}
	for _, i := range lab.Images {
		k, ok := strings.CutPrefix(base, i.Name+"-")
		if !ok || !slices.Contains(i.Hosts, h.Name) {
			continue
		}
		if _, err := version.ParseSemantic(k); err == nil && (img == "" || len(i.Name) > len(img)) {
			img, kube = i.Name, k // the longest name: noble-gpu-v1.35.4 is noble-gpu's
		}
	}
	return img, kube
}

// newerVersion orders Kubernetes versions both parsed by nodeImageOf.
func newerVersion(a, b string) bool {
	va, ea := version.ParseSemantic(a)
	vb, eb := version.ParseSemantic(b)
	return ea == nil && eb == nil && vb.LessThan(va)
}

func imageOf(tags []string) string {
	for _, t := range tags {
		if img, ok := strings.CutPrefix(t, hypervisor.ImageTag("")); ok {
			return img
		}
	}
	return ""
}

func kubeOf(tags []string) string {
	for _, t := range tags {
		if v, ok := strings.CutPrefix(t, "kubernetes-"); ok {
			return v
		}
	}
	return "unknown"
}

// newer orders templates of one image by Kubernetes version, then VMID.
func newer(a, b hypervisor.VM) bool {
	va, ea := version.ParseSemantic(kubeOf(a.Tags))
	vb, eb := version.ParseSemantic(kubeOf(b.Tags))
	switch {
	case ea == nil && eb != nil:
		return true
	case ea == nil && eb == nil && !va.EqualTo(vb):
		return vb.LessThan(va)
	case ea != nil && eb == nil:
		return false
	}
	return a.ID > b.ID
}

func subset(want, have []string) bool {
	return !slices.ContainsFunc(want, func(t string) bool { return !slices.Contains(have, t) })
}
