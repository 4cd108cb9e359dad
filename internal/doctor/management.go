package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
)

const defaultTimeout = 15 * time.Second

// checkManagement finds the management cluster's kubeconfig and, when
// there is one, asks the cluster what it runs.
func (r *Report) checkManagement(ctx context.Context, o Options, lab *config.Lab) {
	const name = "management cluster"
	labName := ""
	if lab != nil {
		labName = lab.Metadata.Name
	}
	if o.Kubeconfig == "" && os.Getenv("KUBECONFIG") == "" && lab == nil {
		r.add(name, Warn, "cannot find the stored kubeconfig without a valid lab config; fix the config or pass --kubeconfig")
		return
	}
	km, err := kube.MgmtKubeconfig(o.Kubeconfig, labName)
	if err != nil {
		r.add(name, Fail, err.Error())
		return
	}
	path := km.Path
	if err := km.Check(); errors.Is(err, kube.ErrNoMgmt) {
		r.add(name, Warn, fmt.Sprintf("no management cluster yet: run labctl mgmt up (no kubeconfig at %s)", path))
		return
	}
	m := &Management{Kubeconfig: path, Stored: km.From == kube.FromStored}
	r.Management = m

	c, err := km.Connect()
	if err != nil {
		r.add(name, Fail, err.Error())
		return
	}
	m.Server = strings.TrimSuffix(c.Host(), "/")

	timeout := o.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	v, err := c.ServerVersion(ctx)
	if err != nil {
		r.add(name, Fail, unreachable(ctx, err, timeout))
		return
	}
	m.Reachable = true
	m.ServerVersion = v.GitVersion
	st, detail := OK, fmt.Sprintf("Kubernetes %s at %s", v.GitVersion, m.Server)
	var notes []string
	if c.Insecure() {
		st = Warn
		notes = append(notes, "the kubeconfig turns TLS verification off")
	}
	for _, f := range km.Files() {
		if fi, err := os.Stat(f); err == nil && fi.Mode().Perm()&0o077 != 0 {
			st = Warn
			notes = append(notes, fmt.Sprintf("%s has mode %04o, wider than 0600: chmod 600 %s", f, fi.Mode().Perm(), f))
		}
	}
	if km.Note != "" {
		notes = append(notes, km.Note)
	}
	if len(notes) > 0 {
		detail += "; " + strings.Join(notes, "; ")
	}
	r.add(name, st, detail)

	r.checkClusterAPI(ctx, c, m, timeout)
	r.checkOperator(ctx, c, m, timeout)
}

func (r *Report) checkClusterAPI(ctx context.Context, c *kube.Client, m *Management, timeout time.Duration) {
	const name = "cluster api"
	d, err := c.CRD(ctx, clusterCRD)
	if err != nil {
		r.add(name, Fail, unreachable(ctx, err, timeout))
		return
	}
	comp := &Component{CRDs: []kube.CRD{d}, ServedVersions: d.Served}
	m.ClusterAPI = comp
	switch {
	case !d.Found:
		r.add(name, Warn, fmt.Sprintf("Cluster API is not installed (no CRD %s): run labctl mgmt install", clusterCRD))
	case !d.Established:
		r.add(name, Fail, fmt.Sprintf("CRD %s is not established: %s", clusterCRD, d.Reason))
	case !d.Serves("v1beta2"):
		comp.Installed = true
		r.add(name, Warn, fmt.Sprintf("installed, but %s serves only %s; labctl needs v1beta2 (Cluster API 1.11 or later): run labctl mgmt install", clusterCRD, strings.Join(d.Served, ", ")))
	default:
		comp.Installed = true
		r.add(name, OK, fmt.Sprintf("installed: %s established, serves %s", clusterCRD, strings.Join(d.Served, ", ")))
	}
}

func (r *Report) checkOperator(ctx context.Context, c *kube.Client, m *Management, timeout time.Duration) {
	const name = "cluster-api-operator"
	ds, err := c.CRDs(ctx, operatorCRDs...)
	if err != nil {
		r.add(name, Fail, unreachable(ctx, err, timeout))
		return
	}
	comp := &Component{CRDs: ds}
	m.Operator = comp
	var missing, pending []string
	for _, d := range ds {
		switch {
		case !d.Found:
			missing = append(missing, d.Name)
		case !d.Established:
			pending = append(pending, d.Name+": "+d.Reason)
		}
	}
	if len(ds) > 0 {
		comp.ServedVersions = ds[0].Served
	}
	switch {
	case len(pending) > 0:
		r.add(name, Fail, "CRDs not established: "+strings.Join(pending, "; "))
	case len(missing) == len(ds):
		r.add(name, Warn, "not installed (no operator.cluster.x-k8s.io CRDs): run labctl mgmt install")
	case len(missing) > 0:
		r.add(name, Warn, fmt.Sprintf("partly installed, missing CRDs %s: run labctl mgmt install", strings.Join(missing, ", ")))
	default:
		comp.Installed = true
		r.add(name, OK, fmt.Sprintf("installed: %d provider CRDs established", len(ds)))
	}
}

// unreachable words an error from talking to the cluster, naming the
// timeout when that was what ended it.
func unreachable(ctx context.Context, err error, timeout time.Duration) string {
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Sprintf("%v (no answer within %s)", err, timeout)
	}
	return err.Error()
}
