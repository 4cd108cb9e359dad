package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/versions"
)

// A Kamaji tenant's Cluster is managed through its ClusterClass
// (clusterapi.TenantClusterClasses), so its upgrade is one apply: the
// Cluster's topology version, and each pool's machine at the image of the
// target. Cluster API's topology controller then upgrades the
// KamajiControlPlane first (Kamaji replaces the tenant's API server pods;
// no VM is made) and each MachineDeployment after it. A pool waiting for
// the control plane is not touched at all meanwhile, so it rolls once,
// with the new version and machine template together
// (internal/controllers/topology/cluster/reconcile_state.go,
// reconcileMachineDeployment, Cluster API v1.12.10). labctl then waits
// for each stage as it does for a kubeadm cluster.

// newTenantUpgradeRun is newUpgradeRun for tenant cl.
func newTenantUpgradeRun(ctx context.Context, o UpgradeOptions, pins versions.Pins, to string, cl *unstructured.Unstructured) (*upgradeRun, error) {
	lab, err := AtVersion(o.Lab, o.Name, to)
	if err != nil {
		return nil, err
	}
	c, err := lab.Cluster(o.Name)
	if err != nil {
		return nil, err
	}
	if !c.Kamaji() {
		return nil, fmt.Errorf("cluster %s runs a Kamaji control plane on the management cluster %s, but lab.yaml gives it controlPlane.provider %q: make lab.yaml say what runs", o.Name, o.Mgmt.Host(), c.ControlPlane.Provider)
	}
	cilium, err := NewCilium(lab, c)
	if err != nil {
		return nil, err
	}
	// The tenant's Cilium is rendered for the target version: its
	// ClusterResourceSet applies it again when the render changed.
	manifest, err := cilium.Manifest(ctx, c)
	if err != nil {
		return nil, err
	}
	r, err := Render(lab, o.Name, manifest)
	if err != nil {
		return nil, err
	}
	u := &upgradeRun{o: o, lab: lab, r: r, cilium: cilium, tenant: cl}
	from, _, _ := unstructured.NestedString(cl.Object, "spec", "topology", "version")
	u.report = &UpgradeReport{Cluster: o.Name, From: from, To: to}
	if err := u.preflight(ctx, pins); err != nil {
		return nil, err
	}
	if err := u.tenantStages(ctx); err != nil {
		return nil, err
	}
	return u, nil
}

// tenantControlPlane is the KamajiControlPlane the tenant's Cluster names.
func (u *upgradeRun) tenantControlPlane() string {
	name, _, _ := unstructured.NestedString(u.tenant.Object, "spec", "controlPlaneRef", "name")
	return name
}

// poolSelector selects the Machines of a tenant's pool: the topology
// controller labels each with its MachineDeployment topology's name.
func (u *upgradeRun) poolSelector(pool string) string {
	return clusterapi.ClusterNameLabel + "=" + u.r.Name + "," + clusterapi.TopologyPoolLabel + "=" + pool
}

// poolReplicas is the replicas of the MachineDeployment the topology
// controller made for pool (0 before it exists).
func (u *upgradeRun) poolReplicas(pool string) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		mds, err := u.o.Mgmt.List(ctx, clusterapi.MachineDeploymentGVK, u.r.Namespace, u.poolSelector(pool))
		if err != nil || len(mds) == 0 {
			return 0, err
		}
		n, _, _ := unstructured.NestedInt64(mds[0].Object, "spec", "replicas")
		return int(n), nil
	}
}

func (u *upgradeRun) tenantStages(ctx context.Context) error {
	rep, m, ns := u.report, u.o.Mgmt, u.r.Namespace
	rep.Stages = append(rep.Stages, RollStage{Name: "control plane",
		Object: "Cluster " + ns + "/" + u.r.Name + " (KamajiControlPlane " + u.tenantControlPlane() + ")",
		From:   rep.From, To: rep.To,
		Does: "sets the Cluster's topology version and its pools' machines at the new image; Cluster API upgrades the KamajiControlPlane first, and Kamaji replaces the tenant's API server pods (no VM)"})
	for _, p := range u.r.Pools {
		names, err := u.machineNames(ctx, u.poolSelector(p.Name))
		if err != nil {
			return err
		}
		from := ""
		if mds, err := m.List(ctx, clusterapi.MachineDeploymentGVK, ns, u.poolSelector(p.Name)); err == nil && len(mds) > 0 {
			from, _, _ = unstructured.NestedString(mds[0].Object, "spec", "template", "spec", "version")
		}
		does := "Cluster API rolls the pool's MachineDeployment once the control plane runs the target, one machine at a time"
		if len(names) == 0 {
			does = "the pool is at zero, so no VM is made: Cluster API moves its templates once the control plane runs the target, and the next scale-up starts at the new version"
		}
		rep.Stages = append(rep.Stages, RollStage{Name: "pool " + p.Name, Object: "MachineDeployment of pool " + p.Name + " (Cluster " + ns + "/" + u.r.Name + "'s topology)",
			From: from, To: rep.To, Machines: names, Does: does})
	}
	u.autoscalerStage(ctx)
	rep.Stages = append(rep.Stages, RollStage{Name: "addons", Object: "ClusterResourceSet " + ns + "/" + clusterapi.TenantAddonsName(u.r.Name),
		To: u.cilium.Release.Chart.Version, Does: "the tenant's Cilium and CoreDNS rendered for the target; Cluster API applies them again where they changed"})
	return nil
}

// tenantObjects are the rendered objects of kind (Cluster, or the
// addons: the ClusterResourceSet and the ConfigMaps it lists).
func (u *upgradeRun) tenantObjects(kinds ...string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range u.r.Objects {
		for _, k := range kinds {
			if o.GetKind() == k {
				out = append(out, o)
			}
		}
	}
	return out
}

func (u *upgradeRun) tenantSteps() []step.Step {
	m, to := u.o.Mgmt, u.report.To
	cluster := u.tenantObjects("Cluster")
	steps := []step.Step{{
		Name: "control plane " + to,
		Plan: func(ctx context.Context) ([]string, error) {
			out, err := plan(ctx, m, cluster)
			if err != nil || len(out) > 0 {
				return out, err
			}
			if done, now, err := u.tenantControlPlaneAt(ctx); err != nil || !done {
				return []string{"wait for the control plane: " + now}, err
			}
			return nil, nil
		},
		Apply: func(ctx context.Context) error {
			if err := apply(ctx, m, cluster); err != nil {
				return err
			}
			return u.waitTenantControlPlane(ctx)
		},
	}}
	for _, p := range u.r.Pools {
		sel, replicas := u.poolSelector(p.Name), u.poolReplicas(p.Name)
		steps = append(steps, step.Step{
			Name: "pool " + p.Name + " " + to,
			Plan: func(ctx context.Context) ([]string, error) { return u.planRoll(ctx, nil, sel, replicas) },
			Apply: func(ctx context.Context) error {
				if err := u.waitPoolMoved(ctx, p.Name); err != nil {
					return err
				}
				return u.waitRoll(ctx, "pool "+p.Name, sel, replicas)
			},
		})
	}
	if a := u.autoscalerStep(); a != nil {
		steps = append(steps, *a)
	}
	addons := u.tenantObjects("ClusterResourceSet", "ConfigMap")
	steps = append(steps, step.Step{
		Name: "addons (Cilium " + u.cilium.Release.Chart.Version + ")",
		Plan: func(ctx context.Context) ([]string, error) { return plan(ctx, m, addons) },
		Apply: func(ctx context.Context) error {
			if err := apply(ctx, m, addons); err != nil {
				return err
			}
			return waitTenantAddons(ctx, m, u.r.Namespace, u.r.Name, u.o.timeout())
		},
	})
	return steps
}

// tenantControlPlaneAt says whether the tenant's control plane runs the
// target: the KamajiControlPlane asks for it, reports it (its
// status.version is Kamaji's TenantControlPlane's), has every replica
// ready, and the tenant's API server itself answers with it.
func (u *upgradeRun) tenantControlPlaneAt(ctx context.Context) (bool, string, error) {
	kcp, found, err := u.o.Mgmt.Get(ctx, kube.Ref{GVK: clusterapi.KamajiControlPlaneGVK, Namespace: u.r.Namespace, Name: u.tenantControlPlane()})
	if err != nil {
		return false, "", err
	}
	if !found {
		return false, "KamajiControlPlane " + u.tenantControlPlane() + " not found", nil
	}
	if done, now := kamajiAt(kcp, u.report.To); !done {
		return false, now, nil
	}
	v, err := u.tenantServerVersion(ctx)
	if err != nil {
		return false, "the tenant's API server: " + err.Error(), nil
	}
	if v != u.report.To {
		return false, "the tenant's API server still answers " + v, nil
	}
	return true, "", nil
}

// kamajiAt judges a KamajiControlPlane against version to.
func kamajiAt(kcp *unstructured.Unstructured, to string) (bool, string) {
	spec, _, _ := unstructured.NestedString(kcp.Object, "spec", "version")
	status, _, _ := unstructured.NestedString(kcp.Object, "status", "version")
	want, _, _ := unstructured.NestedInt64(kcp.Object, "spec", "replicas")
	ready, _, _ := unstructured.NestedInt64(kcp.Object, "status", "readyReplicas")
	isReady, _, _ := unstructured.NestedBool(kcp.Object, "status", "ready")
	if spec != to || status != to || !isReady || ready < want {
		return false, fmt.Sprintf("KamajiControlPlane %s asks for %s, runs %s, %d/%d ready", kcp.GetName(), orNone(spec), orNone(status), ready, want)
	}
	return true, ""
}

func (u *upgradeRun) tenantServerVersion(ctx context.Context) (string, error) {
	kc, err := u.workloadKubeconfig(ctx)
	if err != nil {
		return "", err
	}
	cfg, err := WorkloadConfig(kc, u.r.Name)
	if err != nil {
		return "", err
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

// waitTenantControlPlane waits until tenantControlPlaneAt holds: the
// KamajiControlPlane watched, the tenant's API server asked on each
// change and every few seconds (Kamaji's pods roll without a change to
// the KamajiControlPlane).
func (u *upgradeRun) waitTenantControlPlane(ctx context.Context) error {
	timeout := u.o.timeout()
	deadline := time.Now().Add(timeout)
	w := kube.Watch{GVK: clusterapi.KamajiControlPlaneGVK, Namespace: u.r.Namespace, Name: u.tenantControlPlane()}
	for {
		var last string
		err := u.o.Mgmt.Until(withProgress(ctx), w, "control plane of cluster "+u.r.Name, "running "+u.report.To, min(rollSlice, time.Until(deadline)),
			func(map[string]*unstructured.Unstructured) (bool, string) {
				done, now, err := u.tenantControlPlaneAt(ctx)
				if err != nil {
					return false, err.Error()
				}
				last = now
				return done, now
			})
		var te *kube.TimeoutError
		if err == nil || ctx.Err() != nil || !errors.As(err, &te) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the control plane of cluster %s did not run %s within %s: %s; see Kamaji's log: kubectl -n kamaji-system logs deploy/kamaji", u.r.Name, u.report.To, timeout, last)
		}
	}
}

// waitPoolMoved waits until the topology controller has moved pool's
// MachineDeployment to the target: it does so only once the control
// plane runs it, and a pool at zero has no machine to show it.
func (u *upgradeRun) waitPoolMoved(ctx context.Context, pool string) error {
	w := wait{Watch: kube.Watch{GVK: clusterapi.MachineDeploymentGVK, Namespace: u.r.Namespace, LabelSelector: u.poolSelector(pool)},
		What: "pool " + pool + " of cluster " + u.r.Name, Condition: "its MachineDeployment at " + u.report.To, Timeout: u.o.timeout(),
		Done: func(objs map[string]*unstructured.Unstructured) (bool, string) {
			for _, md := range objs {
				v, _, _ := unstructured.NestedString(md.Object, "spec", "template", "spec", "version")
				if v != u.report.To {
					return false, "MachineDeployment " + md.GetName() + " is at " + orNone(v) + " (Cluster API moves it after the control plane)"
				}
				return true, ""
			}
			return false, "no MachineDeployment yet"
		}}
	return w.until(ctx, u.o.Mgmt)
}
