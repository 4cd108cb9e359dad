package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/files"
	"github.com/labctl/labctl/internal/helm"
	"github.com/labctl/labctl/internal/versions"
)

// Cilium installs the CNI into a workload cluster with the Helm SDK.
type Cilium struct {
	Release helm.Release
	// Cluster is the workload cluster's name, for errors reaching it.
	Cluster string
}

// NewCilium builds the Cilium release of cluster c: the chart version from
// the cluster's cni.cilium (the pin by default), from the first of: the
// offline folder's archive, management.stack.chartRepos.cilium, the chart
// labctl carries (the pinned version only: components.CiliumChart), the
// pinned repository.
func NewCilium(lab *config.Lab, c *config.Cluster) (*Cilium, error) {
	if c == nil {
		return nil, fmt.Errorf("installing Cilium: no cluster given")
	}
	pins, err := versions.Get()
	if err != nil {
		return nil, err
	}
	src := pins.Charts.Cilium
	version := c.CNI.Cilium
	if version == "" {
		version = pins.Cilium
	}
	ch := helm.Chart{Name: src.Chart, Version: version, Repo: src.Repo}
	st := lab.Management.Stack
	var offline string
	if st.OfflineDir != "" {
		dir, err := files.ExpandHome(st.OfflineDir)
		if err != nil {
			return nil, err
		}
		offline = filepath.Join(dir, src.Chart+"-"+version+".tgz")
	}
	switch _, statErr := os.Stat(offline); {
	case offline != "" && statErr == nil:
		ch.Repo, ch.File = "", offline
	case st.ChartRepos.Cilium != "":
		ch.Repo = st.ChartRepos.Cilium
	case version == pins.Cilium:
		if ch.Archive, err = components.CiliumChart(pins); err != nil {
			return nil, err
		}
		ch.Repo = ""
	case offline != "":
		return nil, fmt.Errorf("management.stack.offlineDir %s has no %s, and labctl carries only Cilium %s: put the chart there ('helm pull %s --repo %s --version %s')",
			st.OfflineDir, filepath.Base(offline), pins.Cilium, src.Chart, src.Repo, version)
	}
	return &Cilium{Release: helm.Release{
		Name: clusterapi.CiliumRelease, Namespace: clusterapi.CiliumNamespace, Chart: ch,
		Values: clusterapi.CiliumValues(lab, c),
	}, Cluster: c.Name}, nil
}

func (c *Cilium) String() string {
	return fmt.Sprintf("Helm release %s/%s (chart %s)", c.Release.Namespace, c.Release.Name, c.Release.Chart)
}

func (c *Cilium) client(kubeconfig []byte) (*helm.Client, error) {
	cfg, err := WorkloadConfig(kubeconfig, c.Cluster)
	if err != nil {
		return nil, fmt.Errorf("installing Cilium: %w", err)
	}
	return helm.New(cfg), nil
}

// Plan says what Install would do in the workload cluster kubeconfig
// reaches: "" when the release is deployed as wanted.
func (c *Cilium) Plan(ctx context.Context, kubeconfig []byte) (string, error) {
	hc, err := c.client(kubeconfig)
	if err != nil {
		return "", err
	}
	p, err := hc.Plan(ctx, c.Release)
	if err != nil {
		return "", fmt.Errorf("reading Cilium's release in the workload cluster: %w", err)
	}
	return p, nil
}

// Install installs or upgrades the release. It does not wait for Cilium's
// pods: workers may be at zero, and the autoscaler's startup taint covers
// new nodes until the agent runs.
func (c *Cilium) Install(ctx context.Context, kubeconfig []byte, timeout time.Duration) error {
	hc, err := c.client(kubeconfig)
	if err != nil {
		return err
	}
	_, err = hc.Ensure(ctx, c.Release, timeout)
	return err
}

// TenantCilium is tenant c's Cilium as its ClusterResourceSet applies it
// (clusterapi.Input.Cilium), rendered from the chart NewCilium names
// (Manifest). A kubeadm cluster gets nil: 'cluster create' installs its
// Cilium with Helm once its control plane is up.
func TenantCilium(ctx context.Context, lab *config.Lab, c *config.Cluster) ([]byte, error) {
	if !c.Kamaji() {
		return nil, nil
	}
	ci, err := NewCilium(lab, c)
	if err != nil {
		return nil, err
	}
	return ci.Manifest(ctx, c)
}

// Manifest is the release rendered as 'helm template' renders it for
// cluster c's Kubernetes version. A repository that does not answer is a
// *helm.UnreachableError, wrapped in an error that says how to go on
// without the network.
func (ci *Cilium) Manifest(ctx context.Context, c *config.Cluster) ([]byte, error) {
	// No cluster is reached: the render is client-only.
	out, err := helm.New(&rest.Config{}).Render(ctx, ci.Release, c.KubernetesVersion)
	var offline *helm.UnreachableError
	switch {
	case errors.As(err, &offline):
		return nil, fmt.Errorf("tenant %s's Cilium: %w; with management.stack.offlineDir naming a folder that holds the chart's archive, labctl renders it without the network (docs/mgmt.md, \"Air-gapped\")", c.Name, err)
	case err != nil:
		return nil, fmt.Errorf("tenant %s's Cilium: %w", c.Name, err)
	}
	return out, nil
}
