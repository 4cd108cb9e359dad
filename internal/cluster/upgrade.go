package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// UpgradeOptions are the inputs of 'cluster upgrade'.
type UpgradeOptions struct {
	Options
	// To is the Kubernetes version to move to; empty is the pinned one.
	To  string
	Yes bool
	// Driver opens a hypervisor of the lab, to check that the target's
	// node image is there (the command factory's Driver).
	Driver func(ctx context.Context, name string) (hypervisor.Driver, error)
	// Images, when set, replaces the image check (tests without a
	// hypervisor); it returns the refusals.
	Images func(ctx context.Context, lab *config.Lab, c *config.Cluster) ([]string, error)
}

// kubeletSkew is how many minors a kubelet may lag its API server
// (Kubernetes' version skew policy since v1.28).
const kubeletSkew = 3

// RollStage is one stage of the roll, as the plan shows it.
type RollStage struct {
	Name string `json:"name"`
	// Object is what labctl changes: the KubeadmControlPlane, a
	// MachineDeployment, the autoscaler's Deployment, Cilium's release.
	Object   string   `json:"object"`
	From     string   `json:"from"`
	To       string   `json:"to"`
	Machines []string `json:"machines,omitempty"`
	Does     string   `json:"does"`
}

// UpgradeReport is what the plan and the roll found; -o json prints it.
type UpgradeReport struct {
	Cluster  string         `json:"cluster"`
	From     string         `json:"from"`
	To       string         `json:"to"`
	Stages   []RollStage    `json:"stages"`
	Refusals []string       `json:"refusals,omitempty"`
	Machines []MachineTimes `json:"machines,omitempty"`
}

// MachineTimes is one machine of the roll: replaced, or new.
type MachineTimes struct {
	Stage   string `json:"stage"`
	Name    string `json:"name"`
	Version string `json:"version"`
	// Created and Running are since the stage began; Gone is when an
	// old machine was deleted.
	Created time.Duration `json:"created,omitempty"`
	Running time.Duration `json:"running,omitempty"`
	Gone    time.Duration `json:"gone,omitempty"`
}

// ErrUpgradeRefused is a preflight that failed; nothing was changed.
var ErrUpgradeRefused = errors.New("the upgrade is refused; nothing was changed")

// Upgrade moves a cluster's Kubernetes to o.To (the pin by default):
// a preflight first (the node image at the target exists on every host
// the cluster's machines use, kubeadm's one minor at a time, the 1.35
// cap, the kubelets' skew), then the plan, a question, and the roll: the
// control plane (the KubeadmControlPlane's version and a machine template
// at the new image), each pool in turn with its MachineDeployment's
// rollout (maxSurge 0, maxUnavailable 1), the cluster's autoscaler, and
// Cilium when its pin moved. Each stage waits until every machine of it
// runs the target. Nothing is deleted by labctl: the old templates stay,
// so a failed roll leaves the old machines what they need, and a re-run
// carries on.
func Upgrade(ctx context.Context, o UpgradeOptions) (*UpgradeReport, error) {
	u, err := newUpgradeRun(ctx, o)
	if err != nil {
		return nil, err
	}
	rep := u.report
	if err := writeUpgradePlan(o.IO, o.IO.Err, rep); err != nil {
		return rep, err
	}
	if len(rep.Refusals) > 0 {
		return rep, fmt.Errorf("cluster %s: %w:\n  %s", o.Name, ErrUpgradeRefused, strings.Join(rep.Refusals, "\n  "))
	}
	steps := u.steps()
	if o.DryRun {
		r := &step.Runner{IO: o.IO, DryRun: true, Verbose: o.Verbose}
		if err := r.Run(ctx, steps); err != nil {
			return rep, fmt.Errorf("upgrading cluster %s: %w", o.Name, err)
		}
		fmt.Fprintln(o.IO.Err, "Dry run: nothing was changed.")
		return rep, nil
	}
	if !o.Yes && u.moves() {
		ok, err := o.IO.Confirm(fmt.Sprintf("Upgrade cluster %s to %s as planned?", o.Name, rep.To), "")
		if err != nil {
			return rep, err
		}
		if !ok {
			return rep, errors.New("upgrade declined; nothing was changed")
		}
	}
	r := &step.Runner{IO: o.IO, Verbose: o.Verbose}
	if err := r.Run(ctx, steps); err != nil {
		return rep, fmt.Errorf("upgrading cluster %s: %w\nNothing the old version needs was deleted; fix the cause and run 'labctl cluster upgrade %s' again to carry on", o.Name, err, o.Name)
	}
	fmt.Fprintf(o.IO.Err, "cluster %s runs Kubernetes %s\n", o.Name, rep.To)
	if c, err := o.Lab.Cluster(o.Name); err == nil && c.KubernetesVersion != rep.To {
		fmt.Fprintf(o.IO.Err, "lab.yaml still says %s for cluster %s: set clusters[%s].kubernetesVersion (and its image's kubernetesVersion) to %s, so 'cluster create' applies what runs\n",
			c.KubernetesVersion, o.Name, o.Name, rep.To)
	}
	return rep, nil
}

// upgradeRun is one 'cluster upgrade': the cluster rendered at the target
// and what runs now.
type upgradeRun struct {
	o      UpgradeOptions
	lab    *config.Lab // the lab with the cluster and its images at the target
	r      *clusterapi.Rendered
	cilium *Cilium
	report *UpgradeReport
	cp     *unstructured.Unstructured // the KubeadmControlPlane as it is; nil for a tenant
	// tenant is a Kamaji tenant's Cluster as it is (upgradetenant.go);
	// nil for a kubeadm cluster.
	tenant *unstructured.Unstructured

	kubeconfig step.Found[[]byte]
}

func newUpgradeRun(ctx context.Context, o UpgradeOptions) (*upgradeRun, error) {
	pins, err := versions.Get()
	if err != nil {
		return nil, err
	}
	to := o.To
	if to == "" {
		to = pins.Kubernetes
	}
	if err := config.CheckKubernetesVersion(to); err != nil {
		return nil, fmt.Errorf("--to: %w", err)
	}
	m, ns, name := o.Mgmt, clusterapi.Namespace(o.Name), o.Name
	cl, found, err := m.Get(ctx, kube.Ref{GVK: clusterapi.ClusterGVK, Namespace: ns, Name: name})
	if err != nil {
		return nil, fmt.Errorf("reading cluster %s: %w", name, err)
	}
	if found && clusterapi.IsTenant(cl) {
		return newTenantUpgradeRun(ctx, o, pins, to, cl)
	}
	cpName := name + "-control-plane"
	cp, found, err := m.Get(ctx, kube.Ref{GVK: clusterapi.KubeadmControlPlaneGVK, Namespace: ns, Name: cpName})
	if err != nil {
		return nil, fmt.Errorf("reading cluster %s: %w", name, err)
	}
	if !found {
		return nil, fmt.Errorf("cluster %s has no KubeadmControlPlane %s/%s on the management cluster %s; create it first ('labctl cluster create %s')", name, ns, cpName, m.Host(), name)
	}
	lab, err := AtVersion(o.Lab, name, to)
	if err != nil {
		return nil, err
	}
	r, err := Render(lab, name, nil) // a kubeadm cluster: its Cilium is a Helm release
	if err != nil {
		return nil, err
	}
	c, _ := lab.Cluster(name)
	cilium, err := NewCilium(lab, c)
	if err != nil {
		return nil, err
	}
	u := &upgradeRun{o: o, lab: lab, r: r, cilium: cilium, cp: cp}
	from, _, _ := unstructured.NestedString(cp.Object, "spec", "version")
	u.report = &UpgradeReport{Cluster: name, From: from, To: to}
	if err := u.preflight(ctx, pins); err != nil {
		return nil, err
	}
	if err := u.stages(ctx); err != nil {
		return nil, err
	}
	return u, nil
}

// AtVersion is lab with cluster name, and the images its machines boot,
// at Kubernetes version v: what the cluster is rendered from for an
// upgrade. The images keep their names; their templates and volumes are
// named by version, so the rendered machine templates are new ones.
func AtVersion(lab *config.Lab, name, v string) (*config.Lab, error) {
	c, err := lab.Cluster(name)
	if err != nil {
		return nil, err
	}
	out := *lab
	out.Clusters = slices.Clone(lab.Clusters)
	out.Images = slices.Clone(lab.Images)
	used := map[string]bool{c.Template.Image: true}
	for _, p := range c.Pools {
		used[c.PoolTemplate(p).Image] = true
	}
	for i := range out.Clusters {
		if out.Clusters[i].Name == name {
			out.Clusters[i].KubernetesVersion = v
		}
	}
	for i := range out.Images {
		if used[out.Images[i].Name] {
			out.Images[i].KubernetesVersion = v
		}
	}
	return &out, nil
}

// preflight reads what runs and refuses what kubeadm, the cap, the
// kubelets' skew or a missing node image would not allow.
func (u *upgradeRun) preflight(ctx context.Context, pins versions.Pins) error {
	rep, o := u.report, u.o
	to, err := version.ParseSemantic(rep.To)
	if err != nil {
		return err
	}
	if rep.From != "" {
		from, err := version.ParseSemantic(rep.From)
		if err != nil {
			return fmt.Errorf("cluster %s: its control plane asks for %q: %w", o.Name, rep.From, err)
		}
		switch {
		case to.LessThan(from):
			rep.Refusals = append(rep.Refusals, fmt.Sprintf("the cluster runs %s, newer than %s: Kubernetes does not downgrade (kubeadm refuses it)", rep.From, rep.To))
		case to.Minor() > from.Minor()+1:
			rep.Refusals = append(rep.Refusals, fmt.Sprintf("%s to %s skips a minor version: kubeadm upgrades one minor at a time; run 'labctl cluster upgrade %s --to v1.%d.x' first",
				rep.From, rep.To, o.Name, from.Minor()+1))
		}
	}
	if a, err := version.ParseGeneric(pins.ClusterAutoscaler); err == nil && a.Minor() != to.Minor() {
		rep.Refusals = append(rep.Refusals, fmt.Sprintf("cluster-autoscaler's minor follows Kubernetes', and this labctl pins cluster-autoscaler %s, not a v1.%d release; use a labctl that pins one for %s",
			pins.ClusterAutoscaler, to.Minor(), rep.To))
	}
	machines, err := u.o.Mgmt.List(ctx, clusterapi.MachineGVK, clusterapi.Namespace(o.Name), clusterapi.ClusterNameLabel+"="+o.Name)
	if err != nil {
		return fmt.Errorf("listing cluster %s's Machines: %w", o.Name, err)
	}
	for _, mc := range machines {
		kv, _, _ := unstructured.NestedString(mc.Object, "status", "nodeInfo", "kubeletVersion")
		if kv == "" {
			continue
		}
		k, err := version.ParseGeneric(kv)
		if err != nil {
			continue
		}
		if int(to.Minor())-int(k.Minor()) > kubeletSkew {
			rep.Refusals = append(rep.Refusals, fmt.Sprintf("Machine %s runs kubelet %s, more than %d minors behind %s: the kubelet version skew policy forbids it; upgrade its pool in steps first",
				mc.GetName(), kv, kubeletSkew, rep.To))
		}
	}
	c, err := u.lab.Cluster(o.Name)
	if err != nil {
		return err
	}
	check := o.Images
	if check == nil {
		check = u.checkImages
	}
	missing, err := check(ctx, u.lab, c)
	if err != nil {
		return err
	}
	rep.Refusals = append(rep.Refusals, missing...)
	return nil
}

// checkImages refuses when the target's node image is missing on a host
// a machine of the cluster boots on: on Proxmox the template 'image
// build' tags labctl-image-<name> and kubernetes-<version>; on libvirt
// hosts the volume <name>-<version>.qcow2 'image build' uploads.
func (u *upgradeRun) checkImages(ctx context.Context, lab *config.Lab, c *config.Cluster) ([]string, error) {
	type use struct {
		t     config.Template
		hosts []string
	}
	var uses []use
	if !c.Kamaji() { // a tenant's control plane is Kamaji's pods, not a VM
		uses = append(uses, use{c.Template, []string{c.Hypervisor}})
	}
	for _, p := range c.Pools {
		uses = append(uses, use{c.PoolTemplate(p), p.Hypervisors})
	}
	var out []string
	seen := map[string]bool{}
	for _, us := range uses {
		t := us.t
		if t.Image == "" {
			what := fmt.Sprintf("template.templateID %d", t.TemplateID)
			if t.Volume != "" {
				what = "template.volume " + t.Volume
			}
			out = append(out, fmt.Sprintf("cluster %s boots a fixed node image (%s), which labctl cannot tell the Kubernetes version of: set template.image to an image under images, so labctl finds the %s one by its name", c.Name, what, c.KubernetesVersion))
			continue
		}
		img, err := lab.Image(t.Image)
		if err != nil {
			return nil, err
		}
		for _, h := range us.hosts {
			key := img.Name + "@" + h
			if seen[key] {
				continue
			}
			seen[key] = true
			ok, err := u.imageOn(ctx, lab, img, h)
			if err != nil {
				return nil, err
			}
			if !ok {
				where := "on Proxmox hypervisor " + h + " (a template tagged " + strings.Join(img.TemplateTags(), ", ") + ")"
				if hv, _ := lab.Hypervisor(h); hv != nil && hv.Proxmox == nil {
					where = "on libvirt host " + h + " (volume " + img.VolumeName() + ")"
				}
				out = append(out, fmt.Sprintf("the node image %s at Kubernetes %s is not %s; build it with: labctl image build %s --kubernetes-version %s",
					img.Name, img.KubernetesVersion, where, img.Name, img.KubernetesVersion))
			}
		}
	}
	return out, nil
}

// templater is what the image check needs of a Proxmox driver.
type templater interface {
	Templates(ctx context.Context) ([]hypervisor.VM, error)
}

func (u *upgradeRun) imageOn(ctx context.Context, lab *config.Lab, img *config.Image, host string) (bool, error) {
	if u.o.Driver == nil {
		return false, errors.New("checking node images: no hypervisor driver")
	}
	drv, err := u.o.Driver(ctx, host)
	if err != nil {
		return false, fmt.Errorf("checking that hypervisor %s holds node image %s %s: %w", host, img.Name, img.KubernetesVersion, err)
	}
	defer func() { _ = drivers.Close(drv) }()
	if tm, ok := drv.(templater); ok {
		ts, err := tm.Templates(ctx)
		if err != nil {
			return false, fmt.Errorf("listing the templates of hypervisor %s: %w", host, err)
		}
		want := img.TemplateTags()
		for _, t := range ts {
			if !slices.ContainsFunc(want, func(tag string) bool { return !slices.Contains(t.Tags, tag) }) {
				return true, nil
			}
		}
		return false, nil
	}
	_, err = drv.FindImage(ctx, hypervisor.ImageSpec{FileName: img.VolumeName()})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, hypervisor.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("looking for volume %s on libvirt host %s: %w", img.VolumeName(), host, err)
}

// stages fills the plan's stages from what runs.
func (u *upgradeRun) stages(ctx context.Context) error {
	rep, m, ns := u.report, u.o.Mgmt, u.r.Namespace
	cpMachines, err := u.machineNames(ctx, clusterv1.MachineControlPlaneNameLabel+"="+u.r.ControlPlane)
	if err != nil {
		return err
	}
	rep.Stages = append(rep.Stages, RollStage{Name: "control plane", Object: "KubeadmControlPlane " + ns + "/" + u.r.ControlPlane,
		From: rep.From, To: rep.To, Machines: cpMachines,
		Does: "sets spec.version and a machine template at the new image; KCP replaces each control-plane machine, the new one first"})
	for _, p := range u.r.Pools {
		md, found, err := m.Get(ctx, kube.Ref{GVK: clusterapi.MachineDeploymentGVK, Namespace: ns, Name: p.MachineDeployment})
		if err != nil {
			return err
		}
		from := ""
		if found {
			from, _, _ = unstructured.NestedString(md.Object, "spec", "template", "spec", "version")
		}
		ms, err := u.machineNames(ctx, clusterapi.DeploymentNameLabel+"="+p.MachineDeployment)
		if err != nil {
			return err
		}
		does := "sets the version, machine template and bootstrap template; the MachineDeployment replaces one machine at a time (maxSurge 0, maxUnavailable 1)"
		if len(ms) == 0 {
			does = "sets the version and templates; the pool is at zero, so no VM is made: the next scale-up starts at the new version"
		}
		rep.Stages = append(rep.Stages, RollStage{Name: "pool " + p.Name, Object: "MachineDeployment " + ns + "/" + p.MachineDeployment,
			From: from, To: rep.To, Machines: ms, Does: does})
	}
	u.autoscalerStage(ctx)
	rep.Stages = append(rep.Stages, RollStage{Name: "cilium", Object: u.cilium.String(), To: u.cilium.Release.Chart.Version,
		Does: "helm upgrade in the workload cluster when its chart version moved"})
	return nil
}

// machineNames are the machines selector picks, as the plan shows them:
// "name version", sorted.
func (u *upgradeRun) machineNames(ctx context.Context, selector string) ([]string, error) {
	ms, err := u.o.Mgmt.List(ctx, clusterapi.MachineGVK, u.r.Namespace, selector)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mc := range ms {
		v, _, _ := unstructured.NestedString(mc.Object, "spec", "version")
		out = append(out, mc.GetName()+" "+v)
	}
	sort.Strings(out)
	return out, nil
}

// autoscalerStage is the plan's stage of the cluster's autoscaler.
func (u *upgradeRun) autoscalerStage(ctx context.Context) {
	if len(u.r.Autoscaler) == 0 {
		return
	}
	ns := u.r.Namespace
	from := ""
	if dep, found, err := u.o.Mgmt.Get(ctx, kube.Ref{GVK: kube.DeploymentGVK, Namespace: ns, Name: clusterapi.AutoscalerName}); err == nil && found {
		from = DeploymentTag(dep)
	}
	to := ""
	for _, o := range u.r.Autoscaler {
		if o.GetKind() == "Deployment" {
			to = DeploymentTag(o)
		}
	}
	u.report.Stages = append(u.report.Stages, RollStage{Name: "autoscaler", Object: "Deployment " + ns + "/" + clusterapi.AutoscalerName, From: from, To: to,
		Does: "applies the cluster's cluster-autoscaler at the pinned version, whose minor matches the cluster's"})
}

// autoscalerStep applies the cluster's autoscaler and waits until it is
// available; nil when the cluster has none.
func (u *upgradeRun) autoscalerStep() *step.Step {
	r, m := u.r, u.o.Mgmt
	if len(r.Autoscaler) == 0 {
		return nil
	}
	to := ""
	for _, st := range u.report.Stages {
		if st.Name == "autoscaler" {
			to = st.To
		}
	}
	return &step.Step{
		Name: "cluster-autoscaler " + to,
		Plan: func(ctx context.Context) ([]string, error) { return plan(ctx, m, r.Autoscaler) },
		Apply: func(ctx context.Context) error {
			if err := apply(ctx, m, r.Autoscaler); err != nil {
				return err
			}
			return m.WaitFor(withProgress(ctx), kube.DeploymentGVK, r.Namespace, []string{clusterapi.AutoscalerName}, kube.DeploymentAvailable(), u.o.timeout())
		},
	}
}

// moves reports whether anything would change (or wait).
func (u *upgradeRun) moves() bool {
	for _, s := range u.report.Stages {
		if s.From != s.To {
			return true
		}
		for _, m := range s.Machines {
			if !strings.HasSuffix(m, " "+s.To) {
				return true
			}
		}
	}
	return false
}

// DeploymentTag is the tag of a Deployment's first container's image:
// the version a cluster-autoscaler runs.
func DeploymentTag(dep *unstructured.Unstructured) string {
	cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if len(cs) == 0 {
		return ""
	}
	img, _ := cs[0].(map[string]any)["image"].(string)
	if i := strings.LastIndex(img, ":"); i >= 0 && !strings.Contains(img[i:], "/") {
		return img[i+1:]
	}
	return ""
}

// steps are the roll: the control plane, each pool, the autoscaler,
// Cilium. Each stage's Plan reads the cluster, so a re-run after a
// failure or Ctrl-C skips what is done and waits on what is not.
func (u *upgradeRun) steps() []step.Step {
	if u.tenant != nil {
		return u.tenantSteps()
	}
	r, m, to := u.r, u.o.Mgmt, u.report.To
	cp := r.Find("KubeadmControlPlane", r.ControlPlane)
	cpObjs := []*unstructured.Unstructured{u.infraTemplate(cp, "spec", "machineTemplate", "spec", "infrastructureRef"), cp}
	steps := []step.Step{{
		Name: "control plane " + to,
		Plan: func(ctx context.Context) ([]string, error) {
			return u.planRoll(ctx, cpObjs, clusterv1.MachineControlPlaneNameLabel+"="+r.ControlPlane, nil)
		},
		Apply: func(ctx context.Context) error {
			if err := apply(ctx, m, cpObjs); err != nil {
				return err
			}
			return u.waitRoll(ctx, "control plane", clusterv1.MachineControlPlaneNameLabel+"="+r.ControlPlane, func(ctx context.Context) (int, error) {
				return replicasOf(ctx, m, clusterapi.KubeadmControlPlaneGVK, r.Namespace, r.ControlPlane)
			})
		},
	}}
	for _, p := range r.Pools {
		md := r.Find("MachineDeployment", p.MachineDeployment)
		objs := []*unstructured.Unstructured{
			u.infraTemplate(md, "spec", "template", "spec", "infrastructureRef"),
			r.Find("KubeadmConfigTemplate", refName(md, "spec", "template", "spec", "bootstrap", "configRef")),
			md,
		}
		sel := clusterapi.DeploymentNameLabel + "=" + p.MachineDeployment
		replicas := func(ctx context.Context) (int, error) {
			return replicasOf(ctx, m, clusterapi.MachineDeploymentGVK, r.Namespace, p.MachineDeployment)
		}
		steps = append(steps, step.Step{
			Name: "pool " + p.Name + " " + to,
			Plan: func(ctx context.Context) ([]string, error) { return u.planRoll(ctx, objs, sel, replicas) },
			Apply: func(ctx context.Context) error {
				if err := apply(ctx, m, objs); err != nil {
					return err
				}
				return u.waitRoll(ctx, "pool "+p.Name, sel, replicas)
			},
		})
	}
	if a := u.autoscalerStep(); a != nil {
		steps = append(steps, *a)
	}
	steps = append(steps, step.Step{
		Name: "Cilium " + u.cilium.Release.Chart.Version,
		Plan: func(ctx context.Context) ([]string, error) {
			kc, err := u.workloadKubeconfig(ctx)
			if err != nil {
				return nil, err
			}
			p, err := u.cilium.Plan(ctx, kc)
			if err != nil || p == "" {
				return nil, err
			}
			return []string{p}, nil
		},
		Apply: func(ctx context.Context) error {
			kc, err := u.workloadKubeconfig(ctx)
			if err != nil {
				return err
			}
			return u.cilium.Install(ctx, kc, u.o.timeout())
		},
	})
	return steps
}

func (u *upgradeRun) workloadKubeconfig(ctx context.Context) ([]byte, error) {
	kc, _, err := u.kubeconfig.Get(ctx, func(ctx context.Context) ([]byte, bool, error) {
		data, err := readKubeconfig(ctx, u.o.Mgmt, u.r.Namespace, u.r.Name)
		return data, err == nil, err
	})
	return kc, err
}

// infraTemplate is the rendered machine template owner refers to.
func (u *upgradeRun) infraTemplate(owner *unstructured.Unstructured, path ...string) *unstructured.Unstructured {
	name := refName(owner, path...)
	for _, o := range u.r.Objects {
		if strings.HasSuffix(o.GetKind(), "MachineTemplate") && o.GetName() == name {
			return o
		}
	}
	return nil
}

func refName(o *unstructured.Unstructured, path ...string) string {
	n, _, _ := unstructured.NestedString(o.Object, append(path, "name")...)
	return n
}

func replicasOf(ctx context.Context, m *kube.Client, gvk schema.GroupVersionKind, ns, name string) (int, error) {
	o, found, err := m.Get(ctx, kube.Ref{GVK: gvk, Namespace: ns, Name: name})
	if err != nil || !found {
		return 0, err
	}
	n, found, _ := unstructured.NestedInt64(o.Object, "spec", "replicas")
	if !found {
		return 0, nil
	}
	return int(n), nil
}

// planRoll is a stage's plan: the objects that differ, else the machines
// not at the target yet (a roll under way, which a re-run waits for).
func (u *upgradeRun) planRoll(ctx context.Context, objs []*unstructured.Unstructured, selector string, replicas func(context.Context) (int, error)) ([]string, error) {
	out, err := plan(ctx, u.o.Mgmt, objs)
	if err != nil || len(out) > 0 {
		return out, err
	}
	st, err := u.rollState(ctx, selector, replicas)
	if err != nil {
		return nil, err
	}
	if st.done {
		return nil, nil
	}
	return []string{"wait for the roll: " + st.now}, nil
}

// rollState is where a stage's roll stands.
type rollState struct {
	done bool
	now  string
	// machines by name: version and whether it runs.
	machines map[string]machineState
}

type machineState struct {
	version string
	running bool
	why     string // what it waits for, from its conditions
	// proxmox is its ProxmoxMachine, "" for another infrastructure.
	proxmox  string
	deleting bool
}

func (u *upgradeRun) rollState(ctx context.Context, selector string, replicas func(context.Context) (int, error)) (rollState, error) {
	ms, err := u.o.Mgmt.List(ctx, clusterapi.MachineGVK, u.r.Namespace, selector)
	if err != nil {
		return rollState{}, err
	}
	want := -1
	if replicas != nil {
		if want, err = replicas(ctx); err != nil {
			return rollState{}, err
		}
	}
	return u.judge(ms, want), nil
}

// judge says whether every machine runs the target: as many as wanted
// (want < 0: any), each at the target version, Running, and its node's
// kubelet at the target where the Machine reports it.
func (u *upgradeRun) judge(ms []unstructured.Unstructured, want int) rollState {
	to := u.report.To
	st := rollState{machines: map[string]machineState{}}
	var old, pending []string
	for i := range ms {
		mc := &ms[i]
		s := machineStateOf(mc)
		st.machines[mc.GetName()] = s
		switch {
		case s.version != to:
			old = append(old, mc.GetName()+" ("+s.version+")")
		case !s.running:
			pending = append(pending, mc.GetName()+" ("+s.why+")")
		}
	}
	var parts []string
	if len(old) > 0 {
		sort.Strings(old)
		parts = append(parts, "old: "+strings.Join(old, ", "))
	}
	if len(pending) > 0 {
		sort.Strings(pending)
		parts = append(parts, "coming up: "+strings.Join(pending, ", "))
	}
	if want >= 0 && len(ms) != want && len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("%d machines of %d", len(ms), want))
	}
	st.done = len(parts) == 0
	st.now = strings.Join(parts, "; ")
	return st
}

func machineStateOf(mc *unstructured.Unstructured) machineState {
	v, _, _ := unstructured.NestedString(mc.Object, "spec", "version")
	phase, _, _ := unstructured.NestedString(mc.Object, "status", "phase")
	node, _, _ := unstructured.NestedString(mc.Object, "status", "nodeRef", "name")
	kubelet, _, _ := unstructured.NestedString(mc.Object, "status", "nodeInfo", "kubeletVersion")
	s := machineState{version: v}
	if kind, _, _ := unstructured.NestedString(mc.Object, "spec", "infrastructureRef", "kind"); kind == clusterapi.ProxmoxMachineGVK.Kind {
		s.proxmox, _, _ = unstructured.NestedString(mc.Object, "spec", "infrastructureRef", "name")
	}
	switch {
	case mc.GetDeletionTimestamp() != nil:
		s.why, s.deleting = "deleting", true
	case phase != "Running" || node == "":
		s.why = "phase " + orNone(phase) + notTrue(mc)
	case kubelet != "" && kubelet != v:
		s.why = "node " + node + " runs kubelet " + kubelet
	default:
		s.running = true
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "none yet"
	}
	return s
}

// notTrue lists a Machine's conditions that are not True, with their
// messages: why it is not running, in Cluster API's words.
func notTrue(mc *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
	var out []string
	for _, c := range conds {
		m, _ := c.(map[string]any)
		t, _ := m["type"].(string)
		st, _ := m["status"].(string)
		if st == "True" || t == "Ready" || t == "Available" || t == "UpToDate" || t == "Paused" || t == "Deleting" {
			continue
		}
		if t == "NodeReady" || t == "NodeHealthy" {
			if ok, _ := m["reason"].(string); ok == "" {
				continue
			}
		}
		msg, _ := m["message"].(string)
		reason, _ := m["reason"].(string)
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s: %s %s", t, st, reason, strings.ReplaceAll(msg, "\n", " "))))
	}
	if len(out) == 0 {
		return ""
	}
	return "; " + strings.Join(out, "; ")
}

// waitRoll waits until every machine of a stage runs the target,
// printing each machine as it comes and goes, with times from the
// stage's start. A new machine that does not run within the timeout
// stops the roll, naming it and why. It watches, in slices of at most
// rollSlice, so a stuck machine is noticed even when nothing changes.
func (u *upgradeRun) waitRoll(ctx context.Context, stage, selector string, replicas func(context.Context) (int, error)) error {
	if err := u.replaceGivenUp(ctx, stage, selector); err != nil {
		return err
	}
	began := time.Now()
	seen := map[string]machineState{}
	firstSeen := map[string]time.Time{}
	timeout := u.o.timeout()
	var stuck error
	check := func(machines map[string]machineState) bool {
		for name, s := range machines {
			if s.version != u.report.To || s.running {
				continue
			}
			if time.Since(firstSeen[name]) > timeout {
				stuck = fmt.Errorf("Machine %s/%s did not run %s within %s: %s", u.r.Namespace, name, u.report.To, ui.Duration(timeout), strings.TrimPrefix(s.why, "; "))
				return true
			}
			// No point waiting out the timeout for a machine its
			// provider has given up on (replaceGivenUp).
			if why, gaveUp, err := u.gaveUp(ctx, s); err == nil && gaveUp {
				stuck = fmt.Errorf("Machine %s/%s cannot run %s: CAPMOX gave up on its VM and never tries again: %s; a re-run replaces the machine once the cause is fixed", u.r.Namespace, name, u.report.To, why)
				return true
			}
		}
		return false
	}
	w := kube.Watch{GVK: clusterapi.MachineGVK, Namespace: u.r.Namespace, LabelSelector: selector}
	for {
		slice := min(rollSlice, timeout)
		err := u.o.Mgmt.Until(withProgress(ctx), w, stage+" of cluster "+u.r.Name, "every machine at "+u.report.To, slice,
			func(objs map[string]*unstructured.Unstructured) (bool, string) {
				ms := make([]unstructured.Unstructured, 0, len(objs))
				for _, o := range objs {
					ms = append(ms, *o)
				}
				want := -1
				if replicas != nil {
					n, err := replicas(ctx)
					if err != nil {
						return false, err.Error()
					}
					want = n
				}
				st := u.judge(ms, want)
				u.report.Machines = progressLines(ctx, u.o.IO, stage, u.report.To, began, seen, firstSeen, st.machines, u.report.Machines)
				if check(st.machines) {
					return true, ""
				}
				return st.done, st.now
			})
		var te *kube.TimeoutError
		switch {
		case stuck != nil:
			return stuck
		case err == nil:
			return nil
		case !errors.As(err, &te) || ctx.Err() != nil:
			return err
		case check(seen):
			return stuck
		case time.Since(began) > timeout*time.Duration(len(seen)+1):
			// Each machine had its timeout, and nothing is moving.
			return err
		}
	}
}

// rollSlice is how long one watch of a roll lasts before labctl looks
// for a stuck machine again.
const rollSlice = 15 * time.Second

// progressLines prints what changed among a stage's machines since the
// last look and records each machine's times.
func progressLines(ctx context.Context, io *ui.IO, stage, to string, began time.Time, seen map[string]machineState, firstSeen map[string]time.Time,
	now map[string]machineState, rec []MachineTimes) []MachineTimes {
	at := time.Since(began).Truncate(100 * time.Millisecond)
	// What stood before the stage began is not news. On the first look
	// the controller may already have made the new machine, though: one
	// at the target that does not run yet came with this roll.
	first := len(seen) == 0 && at <= time.Second
	find := func(name string) *MachineTimes {
		for i := range rec {
			if rec[i].Name == name && rec[i].Stage == stage {
				return &rec[i]
			}
		}
		rec = append(rec, MachineTimes{Stage: stage, Name: name})
		return &rec[len(rec)-1]
	}
	names := make([]string, 0, len(now))
	for n := range now {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		s := now[name]
		prev, had := seen[name]
		if !had {
			firstSeen[name] = time.Now()
			if !first || (s.version == to && !s.running) {
				r := find(name)
				r.Version, r.Created = s.version, at
				step.Println(ctx, io.Err, fmt.Sprintf("+ %s %s created (%s)", name, s.version, ui.Duration(at)))
			}
		}
		if s.running && (!had || !prev.running) && !first {
			r := find(name)
			r.Version, r.Running = s.version, at
			step.Println(ctx, io.Err, fmt.Sprintf("✓ %s %s running (%s)", name, s.version, ui.Duration(at)))
		}
		seen[name] = s
	}
	for name, s := range seen {
		if _, ok := now[name]; !ok {
			r := find(name)
			r.Version, r.Gone = s.version, at
			step.Println(ctx, io.Err, fmt.Sprintf("- %s %s deleted (%s)", name, s.version, ui.Duration(at)))
			delete(seen, name)
		}
	}
	return rec
}

// writeUpgradePlan prints the plan: each stage with its machines.
func writeUpgradePlan(s *ui.IO, w io.Writer, rep *UpgradeReport) error {
	st := s.Styles(w)
	fmt.Fprintf(w, "Upgrade plan for cluster %s: Kubernetes %s → %s\n", rep.Cluster, orNone(rep.From), rep.To)
	for i, sg := range rep.Stages {
		from := sg.From
		if from == "" {
			from = "-"
		}
		fmt.Fprintf(w, "  %d. %s (%s) %s → %s: %s\n", i+1, sg.Name, sg.Object, from, sg.To, sg.Does)
		for _, m := range sg.Machines {
			fmt.Fprintf(w, "       %s\n", m)
		}
	}
	for _, r := range rep.Refusals {
		fmt.Fprintf(w, "%s refused: %s\n", st.Failure.Render(ui.SymbolFail), r)
	}
	return nil
}

// replaceGivenUp deletes the stage's machines at the target whose
// infrastructure provider gave up on them for good, so that their owner
// (the MachineDeployment, or KCP) makes new ones: a re-run after the
// cause is fixed then carries on. CAPMOX v0.9.0 marks a ProxmoxMachine
// whose VM could not be made (its template not found, a clone that
// failed) VirtualMachineProvisioned False with reason VMProvisionFailed,
// and from then on skips it (internal/controller/proxmoxmachine_
// controller.go reconcileNormal, pkg/scope/machine.go HasFailed): it
// would never run. Such a machine has no node and holds nothing of the
// old version. Found on the box, where the template came back and the
// re-run waited forever.
func (u *upgradeRun) replaceGivenUp(ctx context.Context, stage, selector string) error {
	m := u.o.Mgmt
	ms, err := m.List(ctx, clusterapi.MachineGVK, u.r.Namespace, selector)
	if err != nil {
		return err
	}
	var c client.Client
	for _, mc := range ms {
		s := machineStateOf(&mc)
		if s.version != u.report.To {
			continue
		}
		if node, _, _ := unstructured.NestedString(mc.Object, "status", "nodeRef", "name"); node != "" {
			continue
		}
		why, gaveUp, err := u.gaveUp(ctx, s)
		if err != nil {
			return err
		}
		if !gaveUp {
			continue
		}
		if c == nil {
			if c, err = m.Ctrl(); err != nil {
				return err
			}
		}
		fmt.Fprintf(u.o.IO.Err, "  replacing Machine %s/%s of %s: CAPMOX gave up on its VM and never tries again (%s)\n", u.r.Namespace, mc.GetName(), stage, why)
		if err := client.IgnoreNotFound(c.Delete(ctx, &mc)); err != nil {
			return fmt.Errorf("replacing Machine %s/%s, which CAPMOX gave up on: %w", u.r.Namespace, mc.GetName(), err)
		}
	}
	return nil
}

// gaveUp reads machine s's ProxmoxMachine: whether CAPMOX has given up
// on its VM (capmoxGaveUp), and why. A machine on another infrastructure,
// or already being deleted, is not given up on.
func (u *upgradeRun) gaveUp(ctx context.Context, s machineState) (string, bool, error) {
	if s.proxmox == "" || s.deleting {
		return "", false, nil
	}
	pm, found, err := u.o.Mgmt.Get(ctx, kube.Ref{GVK: clusterapi.ProxmoxMachineGVK, Namespace: u.r.Namespace, Name: s.proxmox})
	if err != nil || !found {
		return "", false, err
	}
	why, gaveUp := capmoxGaveUp(pm)
	return why, gaveUp, nil
}

// capmoxGaveUp is CAPMOX v0.9.0's HasFailed: the ProxmoxMachine's
// VirtualMachineProvisioned condition False with reason VMProvisionFailed.
func capmoxGaveUp(pm *unstructured.Unstructured) (string, bool) {
	conds, _, _ := unstructured.NestedSlice(pm.Object, "status", "conditions")
	for _, c := range conds {
		cm, _ := c.(map[string]any)
		if cm["type"] == "VirtualMachineProvisioned" && cm["status"] == "False" && cm["reason"] == "VMProvisionFailed" {
			msg, _ := cm["message"].(string)
			return msg, true
		}
	}
	return "", false
}
