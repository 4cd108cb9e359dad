package mgmt

import (
	"context"
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/helm"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/step"
)

var secretGVK = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}

func (in *installer) planChart(ctx context.Context, c *components.Component) ([]string, error) {
	var out []string
	if in.mode == HelmController {
		obj, err := c.Chart.HelmChart()
		if err != nil {
			return nil, err
		}
		if out, err = in.planObjects(ctx, []*unstructured.Unstructured{obj}); err != nil {
			return nil, err
		}
	} else {
		todo, err := in.hc.Plan(ctx, c.Chart.Release)
		if err != nil {
			return nil, err
		}
		if todo != "" {
			out = append(out, todo)
		}
	}
	if len(out) > 0 || in.o.NoWait {
		return out, nil
	}
	st, err := chartStatus(ctx, in.kc, in.hc, in.mode, c)
	if err != nil {
		return nil, err
	}
	if !st.Ready {
		out = append(out, "wait for "+c.Name+": "+st.Reason)
	}
	return out, nil
}

func (in *installer) applyChart(ctx context.Context, c *components.Component) error {
	ch := c.Chart
	if in.mode == HelmController {
		obj, err := ch.HelmChart()
		if err != nil {
			return err
		}
		if _, err := in.kc.Apply(ctx, []*unstructured.Unstructured{obj}, kube.ApplyOptions{}); err != nil {
			return err
		}
		if !in.o.NoWait {
			if err := in.waitRelease(ctx, c); err != nil {
				return err
			}
		}
	} else {
		r := ch.Release
		step.Progress(ctx, "Helm: installing or upgrading release %s/%s (chart %s)", r.Namespace, r.Name, r.Chart)
		if _, err := in.hc.Ensure(ctx, r, in.o.Timeout); err != nil {
			return err
		}
	}
	if in.o.NoWait {
		return nil
	}
	ns := ch.Release.Namespace
	if err := in.kc.WaitFor(ctx, kube.DeploymentGVK, ns, ch.Deployments, kube.DeploymentAvailable(), in.o.Timeout); err != nil {
		return err
	}
	if err := in.kc.WaitFor(ctx, kube.StatefulSetGVK, ns, ch.StatefulSets, kube.StatefulSetReady(), in.o.Timeout); err != nil {
		return err
	}
	return in.kc.WaitFor(ctx, kube.CRDGVK, "", ch.CRDs, kube.CRDEstablished(), in.o.Timeout)
}

// waitRelease waits, by watching the release's Secrets, until
// helm-controller has deployed the chart at the pinned version.
func (in *installer) waitRelease(ctx context.Context, c *components.Component) error {
	r := c.Chart.Release
	w := kube.Watch{GVK: secretGVK, Namespace: r.Namespace, LabelSelector: "owner=helm,name=" + r.Name}
	what := fmt.Sprintf("Helm release %s/%s", r.Namespace, r.Name)
	cond := "deployed at chart version " + r.Chart.Version
	return in.kc.Until(ctx, w, what, cond, in.o.Timeout, func(map[string]*unstructured.Unstructured) (bool, string) {
		st, err := in.hc.State(ctx, r.Name, r.Namespace)
		if err != nil {
			return false, err.Error()
		}
		now := releaseText(st, r.Chart.Version)
		if now == "" {
			return true, ""
		}
		if failed := helmChartFailure(ctx, in.kc, r.Name); failed != "" {
			now += "; " + failed
		}
		return false, now
	})
}

// releaseText says why st is not the release wanted; "" when it is.
func releaseText(st helm.State, version string) string {
	switch {
	case !st.Found:
		return "no Helm release yet"
	case st.Status != release.StatusDeployed:
		return fmt.Sprintf("Helm release is %s (revision %d)", st.Status, st.Revision)
	case st.ChartVersion != version:
		return fmt.Sprintf("Helm release runs chart version %s", st.ChartVersion)
	}
	return ""
}

// helmChartFailure is helm-controller's Failed condition on the HelmChart,
// if any.
func helmChartFailure(ctx context.Context, kc *kube.Client, name string) string {
	obj, found, err := kc.Get(ctx, kube.Ref{GVK: components.HelmChartGVK, Namespace: components.HelmChartNamespace, Name: name})
	if err != nil || !found {
		return ""
	}
	if ok, _ := kube.CondTrue(obj, "Failed"); ok {
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Failed" {
				msg, _ := m["message"].(string)
				return "helm-controller reports Failed: " + msg
			}
		}
	}
	return ""
}

// ComponentStatus is one line of 'mgmt status'.
type ComponentStatus struct {
	Name      string `json:"name"`
	Install   string `json:"install"`
	Wanted    string `json:"wanted"`
	Installed string `json:"installed"`
	Ready     bool   `json:"ready"`
	Reason    string `json:"reason,omitempty"`
}

// chartStatus reads a chart component back: its release's chart version,
// its Deployments, StatefulSets and CRDs.
func chartStatus(ctx context.Context, kc *kube.Client, hc *helm.Client, mode ChartMode, c *components.Component) (ComponentStatus, error) {
	ch := c.Chart
	out := ComponentStatus{Name: c.Name, Install: "Helm chart (" + string(mode) + ")", Wanted: c.Version}
	st, err := hc.State(ctx, ch.Release.Name, ch.Release.Namespace)
	if err != nil {
		return out, err
	}
	if st.Found && st.Status == release.StatusDeployed {
		out.Installed = st.ChartVersion
	}
	var reasons []string
	if r := releaseText(st, c.Version); r != "" {
		reasons = append(reasons, r)
		if mode == HelmController {
			if f := helmChartFailure(ctx, kc, ch.Release.Name); f != "" {
				reasons = append(reasons, f)
			}
		}
	}
	for _, w := range []struct {
		gvk   schema.GroupVersionKind
		names []string
		cond  kube.Condition
	}{
		{kube.DeploymentGVK, ch.Deployments, kube.DeploymentAvailable()},
		{kube.StatefulSetGVK, ch.StatefulSets, kube.StatefulSetReady()},
	} {
		for _, name := range w.names {
			ref := kube.Ref{GVK: w.gvk, Namespace: ch.Release.Namespace, Name: name}
			obj, found, err := kc.Get(ctx, ref)
			if err != nil {
				return out, err
			}
			if !found {
				reasons = append(reasons, ref.String()+" does not exist")
				continue
			}
			if ok, now := w.cond.Check(obj); !ok {
				reasons = append(reasons, ref.String()+" is not "+w.cond.Name+": "+now)
			}
		}
	}
	for _, name := range ch.CRDs {
		d, err := kc.CRD(ctx, name)
		if err != nil {
			return out, err
		}
		switch {
		case !d.Found:
			reasons = append(reasons, "CRD "+name+" does not exist")
		case !d.Established:
			reasons = append(reasons, "CRD "+name+" is not Established: "+d.Reason)
		}
	}
	out.Ready = len(reasons) == 0
	out.Reason = strings.Join(reasons, "; ")
	return out, nil
}
