// Package doctor checks that labctl can do its job here: the lab config
// loads, the secrets and keys it names are in place, the hypervisors
// answer (Proxmox VE's API; libvirt's connection, pool, network and KVM),
// and the management cluster answers with Cluster API installed. It only reads; it changes
// nothing.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/files"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/sshkey"
	"github.com/labctl/labctl/internal/ui"
)

// Status is the outcome of one check.
type Status string

// Check outcomes. Only Fail makes doctor exit non-zero.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
)

// Check is one line of the report.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
}

// Report is everything doctor found; -o json and -o yaml print it whole.
type Report struct {
	// Config names where the lab config came from, e.g. examples/lab.yaml
	// or "built-in local-kvm example".
	Config string `json:"config"`
	// Lab is metadata.name when the config loaded.
	Lab    string  `json:"lab,omitempty"`
	Checks []Check `json:"checks"`
	// Management is set when a management cluster kubeconfig was found.
	Management *Management `json:"management,omitempty"`
	// Capacity is CAPMOX's memory arithmetic per Proxmox cluster.
	Capacity []ClusterFit `json:"capacity,omitempty"`
	Failed   int          `json:"failed"`
	Warnings int          `json:"warnings"`
}

// Management is what the management cluster told doctor.
type Management struct {
	Kubeconfig string `json:"kubeconfig"`
	// Stored is true when the kubeconfig is the one labctl keeps for the
	// lab, false when --kubeconfig named it.
	Stored        bool   `json:"stored"`
	Server        string `json:"server,omitempty"`
	ServerVersion string `json:"serverVersion,omitempty"`
	// Reachable is true when the server answered.
	Reachable  bool       `json:"reachable"`
	ClusterAPI *Component `json:"clusterAPI,omitempty"`
	Operator   *Component `json:"operator,omitempty"`
}

// Component is a set of CRDs that together mean a component is installed.
type Component struct {
	// Installed is true when every CRD exists and is established.
	Installed bool `json:"installed"`
	// ServedVersions are the API versions served by the component's main
	// CRD (for Cluster API: clusters.cluster.x-k8s.io).
	ServedVersions []string   `json:"servedVersions,omitempty"`
	CRDs           []kube.CRD `json:"crds"`
}

// CRDs doctor looks for.
const clusterCRD = "clusters.cluster.x-k8s.io"

// operatorCRDs are the provider CRDs of cluster-api-operator v0.28.0.
var operatorCRDs = []string{
	"coreproviders.operator.cluster.x-k8s.io",
	"bootstrapproviders.operator.cluster.x-k8s.io",
	"controlplaneproviders.operator.cluster.x-k8s.io",
	"infrastructureproviders.operator.cluster.x-k8s.io",
	"addonproviders.operator.cluster.x-k8s.io",
	"ipamproviders.operator.cluster.x-k8s.io",
	"runtimeextensionproviders.operator.cluster.x-k8s.io",
}

// Options are the inputs of 'labctl doctor'.
type Options struct {
	IO     *ui.IO
	Output string // text, json or yaml
	// LoadLab loads the lab config (the command factory's Lab). Doctor
	// calls it itself: a config that does not load is its first check,
	// reported like the others, not an error.
	LoadLab func(ctx context.Context) (*config.Lab, config.Source, error)
	// Kubeconfig is --kubeconfig; empty means the one stored for the lab.
	Kubeconfig string
	// Timeout bounds each talk with the management cluster or a
	// hypervisor's API (default 15 s).
	Timeout time.Duration
	// SkipHypervisors leaves out the checks that call the Proxmox API or
	// libvirt (--skip-hypervisors: for a machine that cannot reach them).
	SkipHypervisors bool
}

// ErrFailed means at least one check failed; the report says which.
var ErrFailed = errors.New("doctor: a check failed")

// Run runs every check, prints the report in o.Output and returns
// ErrFailed when any check failed.
func Run(ctx context.Context, o Options) (*Report, error) {
	r := Diagnose(ctx, o)
	if err := o.IO.Print(o.Output, r, func(w io.Writer) error { return WriteText(o.IO, w, r) }); err != nil {
		return r, err
	}
	if r.Failed > 0 {
		return r, ErrFailed
	}
	return r, nil
}

// WriteText prints the report as a CHECK / STATUS / DETAIL table.
func WriteText(s *ui.IO, w io.Writer, r *Report) error {
	st := s.Styles(w)
	rows := make([][]string, 0, len(r.Checks))
	for _, c := range r.Checks {
		status := string(c.Status)
		switch c.Status {
		case OK:
			status = st.Success.Render(status)
		case Warn:
			status = st.Warning.Render(status)
		case Fail:
			status = st.Failure.Render(status)
		}
		rows = append(rows, []string{c.Name, status, c.Detail})
	}
	return s.Table(w, []string{"CHECK", "STATUS", "DETAIL"}, rows)
}

// Diagnose runs every check and returns the report without printing it.
func Diagnose(ctx context.Context, o Options) *Report {
	r := &Report{}
	lab, src, err := o.LoadLab(ctx)
	r.Config = src.Name
	if err != nil {
		r.add("config", Fail, configProblem(src, err))
	} else {
		r.Lab = lab.Metadata.Name
		r.add("config", OK, fmt.Sprintf("%s: lab %q is valid", src.Name, lab.Metadata.Name))
		for _, h := range lab.Hypervisors {
			if h.Proxmox != nil {
				st, detail := checkSecret(h)
				r.add(fmt.Sprintf("proxmox %s token secret", h.Name), st, detail)
			}
		}
		st, detail := checkSSHKey(lab.Management)
		r.add("ssh public key", st, detail)
		if !o.SkipHypervisors {
			r.checkProxmox(ctx, o, lab)
			r.checkLibvirt(ctx, o, lab)
		}
	}
	r.checkManagement(ctx, o, lab)
	return r
}

func (r *Report) add(name string, st Status, detail string) {
	r.Checks = append(r.Checks, Check{Name: name, Status: st, Detail: detail})
	switch st {
	case Fail:
		r.Failed++
	case Warn:
		r.Warnings++
	}
}

// configProblem is the first problem of a config that did not load, and
// how many more there are.
func configProblem(src config.Source, err error) string {
	var list config.ErrorList
	if errors.As(err, &list) && len(list) > 0 {
		msg := list[0].Error()
		if len(list) > 1 {
			msg += fmt.Sprintf(" (and %d more; run 'labctl config validate -c %s')", len(list)-1, src.Name)
		}
		return msg
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

// checkSecret says whether a Proxmox token secret resolves, read as every
// command reads it (config's CheckTokenSecret). It never reads the
// secret's value into the report.
func checkSecret(h config.Hypervisor) (Status, string) {
	found, warning, err := h.CheckTokenSecret()
	switch {
	case err != nil:
		return Fail, err.Error()
	case warning != "":
		return Warn, warning
	}
	return OK, found
}

// checkSSHKey reads the management VM's public keys as 'mgmt up' and
// 'cluster create' do (sshkey.Authorized), so doctor passes exactly what
// they accept.
func checkSSHKey(m config.Management) (Status, string) {
	keys, err := sshkey.Authorized(m.SSHPublicKeys, m.SSHPublicKeyFile)
	if err != nil {
		return Fail, err.Error()
	}
	var parts []string
	if m.SSHPublicKeyFile != "" {
		path, _ := files.ExpandHome(m.SSHPublicKeyFile) // Authorized expanded it already
		typ, _, _ := strings.Cut(keys[len(m.SSHPublicKeys)], " ")
		parts = append(parts, fmt.Sprintf("%s (%s)", path, typ))
	}
	if n := len(m.SSHPublicKeys); n > 0 {
		parts = append(parts, fmt.Sprintf("%d inline key(s)", n))
	}
	return OK, strings.Join(parts, ", and ")
}
