// Package mgmt holds the management-cluster use cases: 'mgmt up' brings
// the k3s management VM up on any hypervisor.Driver (it never knows which
// kind of hypervisor it drives), 'mgmt install' (also called by 'mgmt up'
// once the k3s VM answers), 'mgmt status', 'mgmt down' and the k3s
// HelmChart manifests that cloud-init drops on the VM.
package mgmt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/helm"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// ChartMode says how charts go onto the cluster.
type ChartMode string

// Chart modes.
const (
	// Auto picks HelmController when the cluster has k3s's HelmChart CRD,
	// else HelmSDK.
	Auto ChartMode = "auto"
	// HelmController applies HelmChart objects that k3s's helm-controller
	// installs.
	HelmController ChartMode = "helm-controller"
	// HelmSDK installs the charts directly with the Helm SDK.
	HelmSDK ChartMode = "helm-sdk"
)

// ChartModes lists the values --charts takes.
var ChartModes = []ChartMode{Auto, HelmController, HelmSDK}

// Check is the one check of a --charts value; "" means Auto.
func (m ChartMode) Check() error {
	if m == "" || slices.Contains(ChartModes, m) {
		return nil
	}
	names := make([]string, len(ChartModes))
	for i, c := range ChartModes {
		names[i] = string(c)
	}
	return fmt.Errorf("--charts %q: must be one of %s", string(m), strings.Join(names, ", "))
}

// DefaultTimeout bounds each component's readiness wait.
const DefaultTimeout = 10 * time.Minute

// InstallOptions are the inputs of Install.
type InstallOptions struct {
	IO  *ui.IO
	Lab *config.Lab
	// Mgmt is the cluster to install onto; it is called only when one is
	// needed (not for EmitK3sManifests).
	Mgmt   func(ctx context.Context) (*kube.Client, error)
	DryRun bool
	// Output is "" or "text" (the plan, on stderr), or with DryRun "yaml"
	// or "json": every object that would be applied, on stdout.
	Output string
	// OfflineDir overrides the lab's management.stack.offlineDir.
	OfflineDir string
	Charts     ChartMode
	// Timeout bounds each component's readiness wait (DefaultTimeout).
	Timeout time.Duration
	// NoWait applies everything without waiting for workloads and
	// providers to be ready. CRDs are still waited for: the provider CRs
	// need them.
	NoWait  bool
	Verbose int
	// EmitK3sManifests, when set, only writes the charts' HelmChart
	// manifests to this folder (see EmitK3sManifests); no cluster is
	// needed.
	EmitK3sManifests string
}

// Install puts the management stack onto the cluster, in order, and waits
// for each piece. Re-running it changes nothing. A failure leaves what was
// applied in place for the next run.
func Install(ctx context.Context, o InstallOptions) error {
	lab := o.Lab
	if o.EmitK3sManifests != "" {
		if o.DryRun {
			return errors.New("--emit-k3s-manifests writes files and changes no cluster; drop --dry-run")
		}
		_, err := EmitK3sManifests(EmitOptions{IO: o.IO, Lab: lab, Dir: o.EmitK3sManifests, OfflineDir: o.OfflineDir})
		return err
	}
	in, err := newInstaller(ctx, o)
	if err != nil {
		return err
	}
	if err := in.refuseUpgrade(ctx); err != nil {
		return err
	}
	if w := components.DevBuildWarning(in.comps, versions.MustGet()); w != "" {
		step.Println(ctx, o.IO.Err, o.IO.Styles(o.IO.Err).Warn(w))
	}
	if o.DryRun {
		step.Println(ctx, o.IO.Err, "Dry run: nothing is applied.")
	}
	runner := &step.Runner{IO: o.IO, DryRun: o.DryRun, Verbose: o.Verbose}
	if err := runner.Run(ctx, in.steps()); err != nil {
		if !o.DryRun {
			var te *kube.TimeoutError
			if errors.As(err, &te) {
				err = fmt.Errorf("%w\nWhat was applied stays; run 'labctl mgmt install' again to carry on, and 'labctl mgmt status' to see each component", err)
			}
		}
		return err
	}
	if o.DryRun && (o.Output == "yaml" || o.Output == "json") {
		return in.printObjects(ctx)
	}
	return nil
}

type installer struct {
	o     InstallOptions
	kc    *kube.Client
	hc    *helm.Client
	mode  ChartMode
	kver  string
	comps []components.Component
}

func newInstaller(ctx context.Context, o InstallOptions) (*installer, error) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if err := o.Charts.Check(); err != nil {
		return nil, err
	}
	if o.Charts == "" {
		o.Charts = Auto
	}
	if o.Output != "" && o.Output != "text" && !o.DryRun {
		return nil, fmt.Errorf("-o %s prints the objects of a dry run; add --dry-run", o.Output)
	}
	comps, err := buildComponents(o.Lab, o.OfflineDir, o.DryRun)
	if err != nil {
		return nil, err
	}
	kc, err := o.Mgmt(ctx)
	if err != nil {
		if o.DryRun {
			err = fmt.Errorf("the dry run compares every object with the cluster it installs onto, so it needs one: %w", err)
		}
		return nil, err
	}
	in := &installer{o: o, kc: kc, hc: newHelm(kc, o.IO, o.Verbose), comps: comps}
	v, err := kc.ServerVersion(ctx)
	if err != nil {
		if o.DryRun {
			return nil, fmt.Errorf("the dry run compares every object with the cluster at %s, so it must reach it: %w", kc.Host(), err)
		}
		return nil, fmt.Errorf("installing the management stack: %w", err)
	}
	in.kver = v.GitVersion
	in.mode, err = detectMode(ctx, kc, o.Charts)
	if err != nil {
		return nil, err
	}
	how := "the Helm SDK"
	if in.mode == HelmController {
		how = "k3s's helm-controller (HelmChart objects)"
	}
	step.Println(ctx, o.IO.Err, fmt.Sprintf("Management stack onto %s (Kubernetes %s), charts through %s", kc.Host(), v.GitVersion, how))
	return in, nil
}

// refuseUpgrade stops install from moving a running component to another
// version: that is 'mgmt upgrade', which shows the plan and asks first.
// Install only installs what is missing and repairs what drifted.
func (in *installer) refuseUpgrade(ctx context.Context) error {
	p, err := in.upgradePlan(ctx)
	if err != nil {
		return err
	}
	var moves []string
	for _, it := range p.Items {
		if it.Action == ActionUpgrade && it.Component != "k3s" && !strings.HasPrefix(it.Component, "cluster-autoscaler ") {
			moves = append(moves, fmt.Sprintf("%s %s → %s", it.Component, it.From, it.To))
		}
	}
	if len(moves) == 0 {
		return nil
	}
	return fmt.Errorf("the management cluster %s runs other versions than this labctl pins (%s): moving them is an upgrade; run 'labctl mgmt upgrade --dry-run' to see the plan, then 'labctl mgmt upgrade'; nothing was changed",
		in.kc.Host(), strings.Join(moves, ", "))
}

// buildComponents renders the stack as mgmt install applies it, reading
// the files the lab names (the Proxmox CA, and the token secrets unless
// dryRun), so every refusal of the lab's settings comes from here.
func buildComponents(lab *config.Lab, offlineDir string, dryRun bool) ([]components.Component, error) {
	o := components.Options{OfflineDir: offlineDir}
	if dryRun {
		// A dry run never reads a secret, as its help says: the Secret is
		// printed with where its value would come from (print.go), and
		// the plan does not compare it with the cluster's (planProvider).
		o.LocalFiles = components.SkipTokenSecrets
	}
	return components.Build(lab, versions.MustGet(), o)
}

func newHelm(kc *kube.Client, io *ui.IO, verbose int) *helm.Client {
	hc := helm.New(kc.RESTConfig())
	if verbose >= 3 {
		hc.Log = func(format string, args ...any) { fmt.Fprintf(io.Err, "helm: "+format+"\n", args...) }
	}
	return hc
}

const helmChartCRD = "helmcharts.helm.cattle.io"

// detectMode turns asked, a mode newInstaller checked, into the one the
// cluster takes.
func detectMode(ctx context.Context, kc *kube.Client, asked ChartMode) (ChartMode, error) {
	if asked == HelmSDK {
		return HelmSDK, nil
	}
	d, err := kc.CRD(ctx, helmChartCRD)
	if err != nil {
		return "", err
	}
	switch {
	case d.Found && d.Established:
		return HelmController, nil
	case asked == HelmController:
		return "", fmt.Errorf("--charts helm-controller: %s has no k3s helm-controller (CRD %s is missing); use --charts helm-sdk", kc.Host(), helmChartCRD)
	}
	return HelmSDK, nil
}

func (in *installer) steps() []step.Step {
	var steps []step.Step
	for i := range in.comps {
		c := &in.comps[i]
		name := c.Name + " " + c.Version
		switch c.Install {
		case components.ChartInstall:
			steps = append(steps, step.Step{Name: name, Plan: in.withProgress(func(ctx context.Context) ([]string, error) { return in.planChart(ctx, c) }),
				Apply: in.applyWith(func(ctx context.Context) error { return in.applyChart(ctx, c) })})
		case components.ProviderInstall:
			steps = append(steps, step.Step{Name: name, Plan: in.withProgress(func(ctx context.Context) ([]string, error) { return in.planProvider(ctx, c) }),
				Apply: in.applyWith(func(ctx context.Context) error { return in.applyProvider(ctx, c) })})
		default:
			steps = append(steps, step.Step{Name: name, Plan: in.withProgress(func(ctx context.Context) ([]string, error) { return in.planObjects(ctx, c.Objects) }),
				Apply: in.applyWith(func(ctx context.Context) error {
					_, err := in.kc.Apply(ctx, c.Objects, kube.ApplyOptions{})
					return err
				})})
		}
	}
	return steps
}

// withProgress routes the kube package's wait progress to the step's line.
func (in *installer) withProgress(f func(context.Context) ([]string, error)) func(context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		return f(kube.WithProgress(ctx, func(s string) { step.Progress(ctx, "%s", s) }))
	}
}

func (in *installer) applyWith(f func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		return f(kube.WithProgress(ctx, func(s string) { step.Progress(ctx, "%s", s) }))
	}
}

func (in *installer) planObjects(ctx context.Context, objs []*unstructured.Unstructured) ([]string, error) {
	cs, err := in.kc.Plan(ctx, objs)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range kube.Changed(cs) {
		out = append(out, c.String())
	}
	return out, nil
}

func (in *installer) planProvider(ctx context.Context, c *components.Component) ([]string, error) {
	objs := c.Objects
	var unread []string
	if in.o.DryRun && len(c.Secrets) > 0 {
		// Its value was not read, so comparing it would be a guess.
		objs = nil
		for _, o := range c.Objects {
			if !holdsSecret(o, c.Secrets) {
				objs = append(objs, o)
			}
		}
		for _, s := range c.Secrets {
			unread = append(unread, fmt.Sprintf("apply Secret %s/%s with %s from %s (not read in a dry run)", s.Ref.Namespace, s.Ref.Name, s.Key, s.From))
		}
	}
	out, err := in.planObjects(ctx, objs)
	out = append(out, unread...)
	if err != nil || len(out) > 0 || in.o.NoWait {
		return out, err
	}
	p := c.Provider
	obj, found, err := in.kc.Get(ctx, p.Ref())
	if err != nil || !found {
		return out, err
	}
	if ok, now := kube.ProviderReady(p.Version).Check(obj); !ok {
		out = append(out, fmt.Sprintf("wait for %s to be Ready at %s (now: %s)", p.Ref(), p.Version, now))
	}
	return out, nil
}

func (in *installer) applyProvider(ctx context.Context, c *components.Component) error {
	p := c.Provider
	// The Provider CR needs its CRD, which the operator's chart brings.
	served, err := in.kc.Serves(p.GVK)
	if err != nil {
		return err
	}
	if !served {
		if err := in.kc.WaitFor(ctx, kube.CRDGVK, "", []string{crdOf(p)}, kube.CRDEstablished(), in.o.Timeout); err != nil {
			return err
		}
	}
	if _, err := in.kc.Apply(ctx, c.Objects, kube.ApplyOptions{}); err != nil {
		return err
	}
	if in.o.NoWait {
		return nil
	}
	return in.kc.WaitFor(ctx, p.GVK, p.Namespace, []string{p.Name}, kube.ProviderReady(p.Version), in.o.Timeout)
}

// holdsSecret reports whether o is one of the Secrets in secrets.
func holdsSecret(o *unstructured.Unstructured, secrets []components.SecretField) bool {
	for _, s := range secrets {
		if s.Ref == kube.RefOf(o) {
			return true
		}
	}
	return false
}

// crdOf names the CRD of a Provider kind: InfrastructureProvider →
// infrastructureproviders.operator.cluster.x-k8s.io.
func crdOf(p *components.Provider) string {
	return strings.ToLower(p.GVK.Kind) + "s." + p.GVK.Group
}
