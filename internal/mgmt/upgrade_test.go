package mgmt_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/mgmt"
	"github.com/labctl/labctl/internal/testing/testbed/standin"
)

// olderProviders are what an older labctl installed: Cluster API one
// patch release back.
var olderProviders = []struct{ kind, ns, name string }{
	{"CoreProvider", "capi-system", "cluster-api"},
	{"BootstrapProvider", "capi-kubeadm-bootstrap-system", "kubeadm"},
	{"ControlPlaneProvider", "capi-kubeadm-control-plane-system", "kubeadm"},
}

// setProviderVersion applies spec.version of a Provider as labctl's
// field manager, as an older (or newer) labctl's install did.
func setProviderVersion(t *testing.T, b *bed, kind, ns, name, v string) {
	t.Helper()
	p := &unstructured.Unstructured{}
	p.SetGroupVersionKind(provider(kind))
	p.SetNamespace(ns)
	p.SetName(name)
	_ = unstructured.SetNestedField(p.Object, v, "spec", "version")
	if _, err := b.client.Apply(ctx(t), []*unstructured.Unstructured{p}, kube.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.client.WaitFor(ctx(t), provider(kind), ns, []string{name}, kube.ProviderReady(v), time.Minute); err != nil {
		t.Fatal(err)
	}
}

func upgrade(t *testing.T, b *bed, lab *config.Lab, c context.Context, mod func(*mgmt.UpgradeOptions)) (*out, *mgmt.UpgradePlan, error) {
	t.Helper()
	var o out
	opts := mgmt.UpgradeOptions{IO: o.io(), Lab: lab, Mgmt: static(b.client), Verbose: 1, Timeout: time.Minute}
	if mod != nil {
		mod(&opts)
	}
	p, err := mgmt.Upgrade(c, opts)
	o.noSecret(t)
	return &o, p, err
}

func item(p *mgmt.UpgradePlan, component string) mgmt.UpgradeItem {
	for _, it := range p.Items {
		if it.Component == component {
			return it
		}
	}
	return mgmt.UpgradeItem{}
}

// TestUpgradePlanResumeAndRefusals runs mgmt upgrade against the real API
// server with the operator's real CRDs, the stand-in operator writing the
// status the real one writes: the plan reads what runs (from → to, what
// each step does and interrupts); install refuses to move versions; a
// dry run writes nothing; Ctrl-C mid-way and a re-run finish the job; a
// re-run after that writes nothing; a downgrade and a provider on a
// contract the core's pin does not serve are refused before any write.
func TestUpgradePlanResumeAndRefusals(t *testing.T) {
	repo := standin.ServeRepo(t)
	b := newBed(t, "capi")
	lab := ownerLab(t, repo.URL)
	standin.PlayDeployments(t, b.env.Config, 100*time.Millisecond)
	op := standin.PlayOperator(t, b.env.Config, 100*time.Millisecond)
	if o, err := install(t, b, lab, nil); err != nil {
		t.Fatalf("install: %v\n%s", err, o.stderr.String())
	}
	for _, p := range olderProviders {
		setProviderVersion(t, b, p.kind, p.ns, p.name, "v1.12.10")
	}

	// install does not move what runs: that is an upgrade.
	again := bedFor(b.env)
	o, err := install(t, again, lab, nil)
	if err == nil || !strings.Contains(err.Error(), "CoreProvider cluster-api v1.12.10 → v1.12.11") || !strings.Contains(err.Error(), "'labctl mgmt upgrade'") {
		t.Errorf("install over an older stack: %v\n%s", err, o.stderr.String())
	}
	if n := again.writes.Load(); n != 0 {
		t.Errorf("the refused install made %d writes", n)
	}

	// The dry run: the plan, no write.
	dry := bedFor(b.env)
	o, p, err := upgrade(t, dry, lab, ctx(t), func(u *mgmt.UpgradeOptions) { u.DryRun = true })
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, o.stderr.String())
	}
	if n := dry.writes.Load(); n != 0 {
		t.Errorf("the dry run made %d writes", n)
	}
	plan := o.stderr.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^CoreProvider cluster-api\s+v1\.12\.10\s+v1\.12\.11\s+upgrade$`),
		regexp.MustCompile(`(?m)^ControlPlaneProvider kubeadm\s+v1\.12\.10\s+v1\.12\.11\s+upgrade$`),
		regexp.MustCompile(`(?m)^InfrastructureProvider proxmox\s+v0\.9\.0\s+v0\.9\.0\s+up to date$`),
		regexp.MustCompile(`(?m)^k3s\s+v1\.35\.\d+\s+v1\.35\.4\+k3s1\s+left: the management cluster is not k3s`),
		regexp.MustCompile(`(?m)^  CoreProvider cluster-api v1\.12\.10 → v1\.12\.11: sets the operator's CoreProvider capi-system/cluster-api spec\.version.*; interrupts that provider's reconciling while its manager restarts; no Machine is replaced\.$`),
	} {
		if !want.MatchString(plan) {
			t.Errorf("the plan lacks %s:\n%s", want, plan)
		}
	}
	if it := item(p, "cert-manager"); it.Action != mgmt.ActionNone || it.From != "v1.21.2" {
		t.Errorf("cert-manager: %+v", it)
	}

	// Ctrl-C once the second provider's step has begun.
	c, cancel := context.WithCancel(ctx(t))
	defer cancel()
	op.Stop()
	op = standin.PlayOperator(t, b.env.Config, 100*time.Millisecond).Skip("kubeadm") // the bootstrap provider never gets there
	go func() {
		for c.Err() == nil {
			bp, found, _ := b.client.Get(c, kube.Ref{GVK: provider("BootstrapProvider"), Namespace: "capi-kubeadm-bootstrap-system", Name: "kubeadm"})
			if v := str(bp, "spec", "version"); found && v == "v1.12.11" {
				time.Sleep(300 * time.Millisecond)
				cancel()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	o, _, err = upgrade(t, bedFor(b.env), lab, c, func(u *mgmt.UpgradeOptions) { u.Yes = true })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "run 'labctl mgmt upgrade' again") {
		t.Fatalf("interrupted upgrade: %v\n%s", err, o.stderr.String())
	}
	if v := str(get(t, b, provider("CoreProvider"), "capi-system", "cluster-api"), "status", "installedVersion"); v != "v1.12.11" {
		t.Errorf("the core provider, done before the interruption, is at %s", v)
	}
	if v := str(get(t, b, provider("ControlPlaneProvider"), "capi-kubeadm-control-plane-system", "kubeadm"), "spec", "version"); v != "v1.12.10" {
		t.Errorf("the step after the interruption ran: control plane provider at %s", v)
	}

	// The re-run's plan picks up at the bootstrap provider, whose upgrade
	// the operator has not finished, and the control plane provider after it.
	_, p, err = upgrade(t, bedFor(b.env), lab, ctx(t), func(u *mgmt.UpgradeOptions) { u.DryRun = true })
	if err != nil {
		t.Fatal(err)
	}
	if it := item(p, "CoreProvider cluster-api"); it.Action != mgmt.ActionNone {
		t.Errorf("re-run plans the core provider again: %+v", it)
	}
	if it := item(p, "BootstrapProvider kubeadm"); it.Action != mgmt.ActionUpgrade || it.From != "v1.12.10" {
		t.Errorf("re-run: bootstrap provider %+v", it)
	}
	if it := item(p, "ControlPlaneProvider kubeadm"); it.Action != mgmt.ActionUpgrade || it.From != "v1.12.10" {
		t.Errorf("re-run: control plane provider %+v", it)
	}
	op.Stop()
	standin.PlayOperator(t, b.env.Config, 100*time.Millisecond)
	o, _, err = upgrade(t, bedFor(b.env), lab, ctx(t), func(u *mgmt.UpgradeOptions) { u.Yes = true })
	if err != nil {
		t.Fatalf("re-run: %v\n%s", err, o.stderr.String())
	}
	checkProviders(t, b)

	// On an upgraded stack: nothing to do, and no write.
	done := bedFor(b.env)
	o, p, err = upgrade(t, done, lab, ctx(t), nil)
	if err != nil || p.Changes() || !strings.Contains(o.stderr.String(), "nothing to do") {
		t.Errorf("upgrade of an upgraded stack: %v\n%s", err, o.stderr.String())
	}
	if n := done.writes.Load(); n != 0 {
		t.Errorf("the upgrade of an upgraded stack made %d writes", n)
	}

	// A downgrade is refused before anything is written.
	setProviderVersion(t, b, "CoreProvider", "capi-system", "cluster-api", "v1.13.0")
	refused := bedFor(b.env)
	o, _, err = upgrade(t, refused, lab, ctx(t), func(u *mgmt.UpgradeOptions) { u.Yes = true })
	if !errors.Is(err, mgmt.ErrUpgradeRefused) || !strings.Contains(err.Error(), "CoreProvider cluster-api runs v1.13.0, newer than v1.12.11 that this labctl pins: labctl does not downgrade") {
		t.Errorf("downgrade: %v\n%s", err, o.stderr.String())
	}
	if n := refused.writes.Load(); n != 0 {
		t.Errorf("the refused downgrade made %d writes", n)
	}
	setProviderVersion(t, b, "CoreProvider", "capi-system", "cluster-api", "v1.12.11")

	// A provider that is not labctl's, on a contract the core's pin does
	// not serve (its status.contract, as the operator reports it).
	other := &unstructured.Unstructured{}
	other.SetGroupVersionKind(provider("InfrastructureProvider"))
	other.SetNamespace("capi-ipam-in-cluster-system")
	other.SetName("docker")
	_ = unstructured.SetNestedField(other.Object, "v0.4.0", "spec", "version")
	if _, err := b.client.Apply(ctx(t), []*unstructured.Unstructured{other}, kube.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.client.WaitFor(ctx(t), provider("InfrastructureProvider"), "capi-ipam-in-cluster-system", []string{"docker"}, kube.ProviderReady("v0.4.0"), time.Minute); err != nil {
		t.Fatal(err)
	}
	dc := dynamic.NewForConfigOrDie(b.env.Config)
	gvr := provider("InfrastructureProvider").GroupVersion().WithResource("infrastructureproviders")
	for {
		live, err := dc.Resource(gvr).Namespace("capi-ipam-in-cluster-system").Get(ctx(t), "docker", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(live.Object, "v1alpha4", "status", "contract")
		if _, err = dc.Resource(gvr).Namespace("capi-ipam-in-cluster-system").UpdateStatus(ctx(t), live, metav1.UpdateOptions{}); err == nil {
			break
		}
	}
	refused = bedFor(b.env)
	o, _, err = upgrade(t, refused, lab, ctx(t), func(u *mgmt.UpgradeOptions) { u.DryRun = true })
	if !errors.Is(err, mgmt.ErrUpgradeRefused) || !strings.Contains(err.Error(), "InfrastructureProvider capi-ipam-in-cluster-system/docker (not labctl's) implements contract v1alpha4") {
		t.Errorf("contract: %v\n%s", err, o.stderr.String())
	}
	if n := refused.writes.Load(); n != 0 {
		t.Errorf("the refused upgrade made %d writes", n)
	}
}
