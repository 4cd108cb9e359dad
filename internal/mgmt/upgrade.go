package mgmt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// UpgradeOptions are the inputs of Upgrade.
type UpgradeOptions struct {
	IO   *ui.IO
	Lab  *config.Lab
	Mgmt func(ctx context.Context) (*kube.Client, error)
	// DryRun prints the plan only; Yes skips the question.
	DryRun, Yes bool
	OfflineDir  string
	Charts      ChartMode
	// Timeout bounds each component's readiness wait (DefaultTimeout).
	Timeout time.Duration
	Verbose int
	// K3s upgrades k3s on the management VM; nil is K3sOverSSH, the VM
	// labctl made, reached as 'mgmt up' reaches it.
	K3s K3sUpgrader
}

// K3sUpgrader moves the management cluster's k3s to a version and returns
// once the API answers at it.
type K3sUpgrader interface {
	Upgrade(ctx context.Context, lab *config.Lab, kc *kube.Client, to string, timeout time.Duration) error
}

// Actions of an upgrade item.
const (
	ActionNone    = "none"    // runs the pinned version
	ActionUpgrade = "upgrade" // runs an older version
	ActionInstall = "install" // not there: mgmt install's job, done on the way
	ActionWait    = "wait"    // at the pin, not ready yet
	ActionSkip    = "skip"    // labctl leaves it (the Reason says why)
)

// UpgradeItem is one line of the plan: one component, from what runs to
// the binary's pin, what the step does and what it interrupts.
type UpgradeItem struct {
	Component  string `json:"component"`
	From       string `json:"from"`
	To         string `json:"to"`
	Action     string `json:"action"`
	Does       string `json:"does,omitempty"`
	Interrupts string `json:"interrupts,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// UpgradePlan is what 'mgmt upgrade' would do, read from the cluster.
type UpgradePlan struct {
	Server string        `json:"server"`
	Items  []UpgradeItem `json:"items"`
	// Refusals are why the plan cannot run; nothing is changed while
	// there is one.
	Refusals []string `json:"refusals,omitempty"`
}

// Changes reports whether running the plan writes anything.
func (p *UpgradePlan) Changes() bool {
	for _, it := range p.Items {
		if it.Action != ActionNone && it.Action != ActionSkip {
			return true
		}
	}
	return false
}

// ErrUpgradeRefused is a plan with refusals; the error lists them.
var ErrUpgradeRefused = errors.New("the upgrade is refused; nothing was changed")

// ErrUpgradeDeclined is a plan the user said no to.
var ErrUpgradeDeclined = errors.New("upgrade declined; nothing was changed")

// Upgrade moves the management stack to the versions this binary pins:
// it reads what runs, prints the plan (from, to, what each step does and
// interrupts), refuses a downgrade or a jump the providers' contracts do
// not allow, asks, and then runs the steps in order, each waiting for its
// component to be Ready before the next. Every step reads the cluster
// first, so after an interruption a re-run starts where it stopped, and
// on an upgraded stack it writes nothing.
func Upgrade(ctx context.Context, o UpgradeOptions) (*UpgradePlan, error) {
	in, err := newInstaller(ctx, InstallOptions{
		IO: o.IO, Lab: o.Lab, Mgmt: o.Mgmt, DryRun: o.DryRun, OfflineDir: o.OfflineDir,
		Charts: o.Charts, Timeout: o.Timeout, Verbose: o.Verbose,
	})
	if err != nil {
		return nil, err
	}
	p, err := in.upgradePlan(ctx)
	if err != nil {
		return nil, err
	}
	if err := writeUpgradePlan(o.IO, o.IO.Err, p); err != nil {
		return p, err
	}
	if len(p.Refusals) > 0 {
		return p, fmt.Errorf("%w:\n  %s", ErrUpgradeRefused, strings.Join(p.Refusals, "\n  "))
	}
	if !p.Changes() {
		step.Println(ctx, o.IO.Err, "The management stack runs the versions this labctl pins; nothing to do.")
		return p, nil
	}
	if o.DryRun {
		step.Println(ctx, o.IO.Err, "Dry run: nothing was changed. Run without --dry-run to upgrade.")
		return p, nil
	}
	if !o.Yes {
		ok, err := o.IO.Confirm("Upgrade the management stack as planned?", "")
		if err != nil {
			return p, err
		}
		if !ok {
			return p, ErrUpgradeDeclined
		}
	}
	k3s := o.K3s
	if k3s == nil {
		k3s = K3sOverSSH{}
	}
	steps := in.k3sSteps(p, k3s)
	steps = append(steps, in.steps()...)
	steps = append(steps, in.autoscalerSteps(p)...)
	runner := &step.Runner{IO: o.IO, Verbose: o.Verbose}
	if err := runner.Run(ctx, steps); err != nil {
		return p, fmt.Errorf("%w\nWhat was upgraded stays; run 'labctl mgmt upgrade' again to carry on from here", err)
	}
	step.Println(ctx, o.IO.Err, "The management stack runs the pinned versions.")
	return p, nil
}

// upgradePlan reads each component back and compares it with the pin.
func (in *installer) upgradePlan(ctx context.Context) (*UpgradePlan, error) {
	kc := in.kc
	p := &UpgradePlan{Server: kc.Host()}
	k3s := in.k3sItem()
	p.Items = append(p.Items, k3s)
	if r := refuseOlderTarget(k3s, true); r != "" {
		p.Refusals = append(p.Refusals, r)
	}
	for i := range in.comps {
		c := &in.comps[i]
		var st ComponentStatus
		var err error
		switch c.Install {
		case components.ChartInstall:
			st, err = chartStatus(ctx, kc, in.hc, in.mode, c)
		case components.ProviderInstall:
			st, err = providerStatus(ctx, kc, c)
		default:
			st, err = manifestStatus(ctx, kc, c)
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s from %s: %w", c.Name, kc.Host(), err)
		}
		it := itemFor(c, st)
		p.Items = append(p.Items, it)
		// cert-manager asks for one minor at a time (its upgrade docs);
		// the others may skip.
		if r := refuseOlderTarget(it, c.Name == "cert-manager"); r != "" {
			p.Refusals = append(p.Refusals, r)
		}
	}
	refusals, err := in.contractRefusals(ctx)
	if err != nil {
		return nil, err
	}
	p.Refusals = append(p.Refusals, refusals...)
	auto, err := in.autoscalerItems(ctx)
	if err != nil {
		return nil, err
	}
	p.Items = append(p.Items, auto...)
	return p, nil
}

// itemFor turns a component's status into its plan line.
func itemFor(c *components.Component, st ComponentStatus) UpgradeItem {
	it := UpgradeItem{Component: c.Name, From: st.Installed, To: c.Version}
	switch {
	case st.Installed == "":
		it.Action = ActionInstall
		it.Reason = st.Reason
	case st.Installed != c.Version:
		it.Action = ActionUpgrade
	case !st.Ready:
		it.Action, it.Reason = ActionWait, st.Reason
	default:
		it.Action = ActionNone
	}
	switch c.Install {
	case components.ChartInstall:
		it.Does = "helm upgrade of release " + c.Chart.Release.Namespace + "/" + c.Chart.Release.Name + ", then waits for its Deployments and CRDs"
		if c.Name == "cert-manager" {
			it.Interrupts = "certificate issuing and cert-manager's webhook while its pods restart"
		} else {
			it.Interrupts = "provider installs and upgrades while the operator restarts; running providers keep running"
		}
	case components.ProviderInstall:
		it.Does = "sets the operator's " + c.Provider.Ref().String() + " spec.version; the operator replaces the provider's components, then waits for Ready"
		it.Interrupts = "that provider's reconciling while its manager restarts; no Machine is replaced"
	default:
		it.Does = "server-side applies labctl's manifests"
		it.Interrupts = "nothing"
	}
	return it
}

// refuseOlderTarget says why the pin must not replace what runs: it is
// older (labctl does not downgrade: Cluster API and the operator do not
// support it, nor does k3s's datastore), or, with oneMinor, more than one
// minor newer.
func refuseOlderTarget(it UpgradeItem, oneMinor bool) string {
	if it.Action != ActionUpgrade {
		return ""
	}
	from, err1 := version.ParseGeneric(it.From)
	to, err2 := version.ParseGeneric(it.To)
	if err1 != nil || err2 != nil {
		return fmt.Sprintf("%s: cannot compare %q with the pin %q", it.Component, it.From, it.To)
	}
	if to.LessThan(from) || (to.EqualTo(from) && buildNumber(it.To) < buildNumber(it.From)) {
		return fmt.Sprintf("%s runs %s, newer than %s that this labctl pins: labctl does not downgrade; use a labctl that pins %s or later", it.Component, it.From, it.To, it.From)
	}
	if oneMinor && to.Major() == from.Major() && to.Minor() > from.Minor()+1 {
		return fmt.Sprintf("%s runs %s and this labctl pins %s: that skips %d minor versions, and %s upgrades one minor at a time; upgrade with a labctl that pins v%d.%d first",
			it.Component, it.From, it.To, to.Minor()-from.Minor()-1, it.Component, from.Major(), from.Minor()+1)
	}
	return ""
}

// buildNumber is the N of a k3s version's +k3sN, 0 for anything else:
// v1.35.4+k3s2 is a newer k3s than v1.35.4+k3s1.
func buildNumber(v string) int {
	_, b, ok := strings.Cut(v, "+k3s")
	if !ok {
		return 0
	}
	n := 0
	fmt.Sscan(b, &n)
	return n
}

// compatibleContracts is Cluster API's rule for which provider contracts
// can serve a management cluster whose core implements contract c
// (sigs.k8s.io/cluster-api internal/contract GetCompatibleVersions, which
// clusterctl upgrade applies): c itself, and v1beta1 beside v1beta2 until
// v1beta1 is retired.
func compatibleContracts(c string) []string {
	if c == "v1beta2" {
		return []string{"v1beta2", "v1beta1"}
	}
	return []string{c}
}

// targetContract is the Cluster API contract a provider component's
// pinned version implements: from the metadata.yaml labctl hands the
// operator (labctl's own provider, or an offline folder), as clusterctl
// reads a release's releaseSeries; else the contract of the Cluster API
// types this labctl is built with, which the pinned providers implement
// (the operator checks the fetched metadata.yaml again).
func targetContract(c *components.Component) (contract, from string, err error) {
	for _, o := range c.Objects {
		if o.GetKind() != "ConfigMap" {
			continue
		}
		raw, found, _ := unstructured.NestedString(o.Object, "data", "metadata")
		if !found {
			continue
		}
		var md clusterctlv1.Metadata
		if err := yaml.Unmarshal([]byte(raw), &md); err != nil {
			return "", "", fmt.Errorf("%s: reading its metadata.yaml: %w", c.Name, err)
		}
		v, err := version.ParseSemantic(c.Version)
		if err != nil {
			return "", "", fmt.Errorf("%s: version %q: %w", c.Name, c.Version, err)
		}
		rs := md.GetReleaseSeriesForVersion(v)
		if rs == nil {
			return "", "metadata.yaml", fmt.Errorf("%s %s: its metadata.yaml has no release series v%d.%d, so its contract is unknown (clusterctl and the operator refuse it too); give the release's own metadata.yaml",
				c.Name, c.Version, v.Major(), v.Minor())
		}
		return rs.Contract, "metadata.yaml", nil
	}
	return clusterv1.GroupVersion.Version, "labctl's Cluster API types", nil
}

// contractRefusals applies clusterctl upgrade's rule: every provider,
// labctl's and any other the operator runs, must implement a contract
// compatible with the one the core provider's target implements.
func (in *installer) contractRefusals(ctx context.Context) ([]string, error) {
	var core string
	ours := map[kube.Ref]bool{}
	type target struct{ name, version, contract string }
	var targets []target
	var out []string
	for i := range in.comps {
		c := &in.comps[i]
		if c.Provider == nil {
			continue
		}
		ours[c.Provider.Ref()] = true
		ct, _, err := targetContract(c)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		if c.Provider.GVK.Kind == "CoreProvider" {
			core = ct
		}
		targets = append(targets, target{c.Name, c.Version, ct})
	}
	if core == "" {
		return out, nil
	}
	ok := compatibleContracts(core)
	for _, t := range targets {
		if !contains(ok, t.contract) {
			out = append(out, fmt.Sprintf("%s %s implements Cluster API contract %s, but the core provider's pin implements %s (compatible: %s): Cluster API runs all providers on one contract",
				t.name, t.version, t.contract, core, strings.Join(ok, ", ")))
		}
	}
	// Providers labctl does not manage stay at what they run; each must
	// still fit the core's contract.
	for _, crd := range components.OperatorCRDs {
		kind := operatorKind(crd)
		gvk := operatorProviderGVK(kind)
		served, err := in.kc.Serves(gvk)
		if err != nil || !served {
			continue
		}
		items, err := in.kc.List(ctx, gvk, "", "")
		if err != nil {
			return nil, fmt.Errorf("listing the operator's %ss: %w", kind, err)
		}
		for _, p := range items {
			ref := kube.RefOf(&p)
			if ours[ref] {
				continue
			}
			have, _, _ := unstructured.NestedString(p.Object, "status", "contract")
			if have != "" && !contains(ok, have) {
				out = append(out, fmt.Sprintf("%s (not labctl's) implements contract %s, which the core provider's pin (%s) does not serve; upgrade it to a release on %s alongside, or delete it",
					ref, have, core, strings.Join(ok, " or ")))
			}
		}
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// operatorKind is the Kind of a provider CRD of the operator:
// coreproviders.operator.cluster.x-k8s.io → CoreProvider.
func operatorKind(crd string) string {
	plural, _, _ := strings.Cut(crd, ".")
	for _, k := range []string{"CoreProvider", "BootstrapProvider", "ControlPlaneProvider", "InfrastructureProvider", "IPAMProvider"} {
		if strings.ToLower(k)+"s" == plural {
			return k
		}
	}
	return ""
}

func operatorProviderGVK(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "operator.cluster.x-k8s.io", Version: "v1alpha2", Kind: kind}
}

// autoscalerItems are the lab's clusters' autoscalers that exist on the
// management cluster: each runs the pinned cluster-autoscaler when its
// minor matches the cluster's Kubernetes (cluster-autoscaler's minor
// follows Kubernetes'); otherwise 'cluster upgrade' moves it with the
// cluster.
func (in *installer) autoscalerItems(ctx context.Context) ([]UpgradeItem, error) {
	pin := versions.MustGet().ClusterAutoscaler
	var out []UpgradeItem
	for _, c := range in.o.Lab.Clusters {
		ns := clusterapi.Namespace(c.Name)
		dep, found, err := in.kc.Get(ctx, kube.Ref{GVK: kube.DeploymentGVK, Namespace: ns, Name: clusterapi.AutoscalerName})
		if err != nil {
			return nil, fmt.Errorf("reading cluster %s's autoscaler: %w", c.Name, err)
		}
		if !found {
			continue
		}
		it := UpgradeItem{Component: "cluster-autoscaler " + c.Name, From: cluster.DeploymentTag(dep), To: pin,
			Does:       "applies cluster " + c.Name + "'s autoscaler Deployment with the pinned image",
			Interrupts: "autoscaling of " + c.Name + " while its pod restarts (a minute at most); nodes stay"}
		kv, err := runningKubernetes(ctx, in.kc, ns, c.Name)
		if err != nil {
			return nil, err
		}
		switch {
		case it.From == it.To:
			it.Action = ActionNone
		case kv != "" && minorOf(kv) != minorOf(pin):
			it.Action = ActionSkip
			it.Reason = fmt.Sprintf("cluster %s runs Kubernetes %s; its autoscaler moves to %s with 'labctl cluster upgrade %s'", c.Name, kv, pin, c.Name)
		default:
			it.Action = ActionUpgrade
			if r := refuseOlderTarget(it, false); r != "" {
				it.Action, it.Reason = ActionSkip, r
			}
		}
		out = append(out, it)
	}
	return out, nil
}

// autoscalerSteps re-apply the autoscaler of each cluster the plan moves.
func (in *installer) autoscalerSteps(p *UpgradePlan) []step.Step {
	var steps []step.Step
	for _, it := range p.Items {
		name, ok := strings.CutPrefix(it.Component, "cluster-autoscaler ")
		if !ok || it.Action != ActionUpgrade {
			continue
		}
		steps = append(steps, step.Step{
			Name: it.Component + " " + it.To,
			Plan: func(ctx context.Context) ([]string, error) {
				objs, err := autoscalerObjects(in.o.Lab, name)
				if err != nil {
					return nil, err
				}
				return in.planObjects(ctx, objs)
			},
			Apply: func(ctx context.Context) error {
				objs, err := autoscalerObjects(in.o.Lab, name)
				if err != nil {
					return err
				}
				if _, err := in.kc.Apply(ctx, objs, kube.ApplyOptions{}); err != nil {
					return err
				}
				return in.kc.WaitFor(ctx, kube.DeploymentGVK, clusterapi.Namespace(name), []string{clusterapi.AutoscalerName}, kube.DeploymentAvailable(), in.o.Timeout)
			},
		})
	}
	return steps
}

func autoscalerObjects(lab *config.Lab, name string) ([]*unstructured.Unstructured, error) {
	r, err := cluster.Render(lab, name, nil) // the autoscaler only
	if err != nil {
		return nil, err
	}
	return r.Autoscaler, nil
}

// runningKubernetes is the version a cluster's control plane reports
// (KubeadmControlPlane status.version), else what it is asked to run.
func runningKubernetes(ctx context.Context, kc *kube.Client, ns, name string) (string, error) {
	served, err := kc.Serves(clusterapi.KubeadmControlPlaneGVK)
	if err != nil || !served {
		return "", err
	}
	cp, found, err := kc.Get(ctx, kube.Ref{GVK: clusterapi.KubeadmControlPlaneGVK, Namespace: ns, Name: name + "-control-plane"})
	if err != nil || !found {
		return "", err
	}
	if v, _, _ := unstructured.NestedString(cp.Object, "status", "version"); v != "" {
		return v, nil
	}
	v, _, _ := unstructured.NestedString(cp.Object, "spec", "version")
	return v, nil
}

func minorOf(v string) string {
	p, err := version.ParseGeneric(v)
	if err != nil {
		return v
	}
	return fmt.Sprintf("%d.%d", p.Major(), p.Minor())
}

// writeUpgradePlan prints the plan as a table, then each step's effect.
func writeUpgradePlan(s *ui.IO, w io.Writer, p *UpgradePlan) error {
	st := s.Styles(w)
	fmt.Fprintf(w, "Upgrade plan for the management cluster %s:\n", p.Server)
	rows := make([][]string, 0, len(p.Items))
	for _, it := range p.Items {
		from := it.From
		if from == "" {
			from = "-"
		}
		what := it.Action
		switch it.Action {
		case ActionNone:
			what = st.Dim.Render("up to date")
		case ActionSkip:
			what = "left: " + it.Reason
		case ActionWait:
			what = "wait: " + it.Reason
		case ActionInstall:
			what = "install (not there yet)"
		}
		rows = append(rows, []string{it.Component, from, it.To, what})
	}
	if err := s.Table(w, []string{"COMPONENT", "FROM", "TO", "ACTION"}, rows); err != nil {
		return err
	}
	for _, it := range p.Items {
		if it.Action != ActionUpgrade {
			continue
		}
		fmt.Fprintf(w, "  %s %s → %s: %s; interrupts %s.\n", it.Component, it.From, it.To, it.Does, it.Interrupts)
	}
	for _, r := range p.Refusals {
		fmt.Fprintf(w, "%s refused: %s\n", st.Failure.Render(ui.SymbolFail), r)
	}
	return nil
}
