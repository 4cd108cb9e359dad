package mgmt_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/mgmt"
	"github.com/labctl/labctl/internal/testing/testbed/standin"
	"github.com/labctl/labctl/internal/versions"
)

// kamajiSteps are the components Kamaji adds, after the other providers.
func kamajiSteps() []string {
	p := versions.MustGet()
	return []string{"Kamaji " + p.Kamaji.Version, "Kamaji datastore (kamaji-etcd) " + p.KamajiEtcd.Chart, "ControlPlaneProvider kamaji " + p.KamajiControlPlane}
}

// With management.stack.kamaji.enabled, 'mgmt install --dry-run -o yaml'
// shows Kamaji's objects without a network (the chart and the provider's
// components come from the binary); install applies them, each accepted
// by a real kube-apiserver with k3s's HelmChart CRD and the operator's
// CRDs; a re-run writes nothing; 'mgmt status' has a row for each part,
// saying what it waits for.
func TestKamajiStackInstallsAndReportsEachPart(t *testing.T) {
	b := newBed(t, "capi", "operator", "helm-controller")
	lab := ownerLab(t, standin.ServeRepo(t).URL)
	lab.Management.Stack.Kamaji.Enabled = true
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkJ2tN8s0jv4m1Yl0QhRr5o5m3u0T0q9b8mWc3xYk2F owner@laptop"}
	pins := versions.MustGet()
	want := append(slices.Clone(wantSteps[:7]), append(kamajiSteps(), wantSteps[7])...)

	o, err := install(t, b, lab, func(o *mgmt.InstallOptions) { o.DryRun, o.Output = true, "yaml" })
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, o.stderr.String())
	}
	refs := printedRefs(t, b, o)
	cm := "ConfigMap kamaji-system/control-plane-kamaji-" + pins.KamajiControlPlane
	wantRefs := "IPAMProvider capi-ipam-in-cluster-system/in-cluster\nHelmChart kube-system/kamaji\nHelmChart kube-system/kamaji-etcd\n" +
		"Namespace kamaji-system\n" + cm + "\nControlPlaneProvider kamaji-system/kamaji\nNamespace cluster-autoscaler"
	if !strings.Contains(strings.Join(refs, "\n"), wantRefs) {
		t.Fatalf("dry run printed:\n%s\nwant, in order:\n%s", strings.Join(refs, "\n"), wantRefs)
	}
	for _, line := range []string{
		"! Kamaji " + pins.Kamaji.Version + " (would change)", "would: create HelmChart kube-system/kamaji",
		"would: create HelmChart kube-system/kamaji-etcd", "would: create " + cm,
		"would: create ControlPlaneProvider kamaji-system/kamaji",
	} {
		if !strings.Contains(o.stderr.String(), line) {
			t.Errorf("the plan lacks %q:\n%s", line, o.stderr.String())
		}
	}

	// Applied for real; nothing plays Kamaji, its datastore or the
	// operator here, so nothing is waited for but the CRDs.
	o, err = install(t, b, lab, func(o *mgmt.InstallOptions) { o.NoWait = true })
	if err != nil {
		t.Fatalf("install: %v\n%s", err, o.stderr.String())
	}
	checkStepsOf(t, want, o.stderr.String(), "")
	hc := get(t, b, schema.GroupVersionKind{Group: "helm.cattle.io", Version: "v1", Kind: "HelmChart"}, "kube-system", "kamaji-etcd")
	if str(hc, "spec", "chart") != "kamaji-etcd" || str(hc, "spec", "version") != pins.KamajiEtcd.Chart || str(hc, "spec", "repo") != pins.Charts.KamajiEtcd.Repo || str(hc, "spec", "targetNamespace") != "kamaji-system" {
		t.Errorf("HelmChart kamaji-etcd spec = %v", hc.Object["spec"])
	}
	hc = get(t, b, schema.GroupVersionKind{Group: "helm.cattle.io", Version: "v1", Kind: "HelmChart"}, "kube-system", "kamaji")
	if str(hc, "spec", "chartContent") == "" || str(hc, "spec", "repo") != "" || str(hc, "spec", "targetNamespace") != "kamaji-system" {
		t.Errorf("HelmChart kamaji: repo %q, targetNamespace %q, chartContent of %d bytes", str(hc, "spec", "repo"), str(hc, "spec", "targetNamespace"), len(str(hc, "spec", "chartContent")))
	}
	cp := get(t, b, provider("ControlPlaneProvider"), "kamaji-system", "kamaji")
	if str(cp, "spec", "version") != pins.KamajiControlPlane {
		t.Errorf("ControlPlaneProvider kamaji spec.version = %q", str(cp, "spec", "version"))
	}

	again := bedFor(b.env)
	o, err = install(t, again, lab, func(o *mgmt.InstallOptions) { o.NoWait = true })
	if err != nil {
		t.Fatalf("re-run: %v\n%s", err, o.stderr.String())
	}
	if n := again.writes.Load(); n != 0 {
		t.Errorf("the re-run made %d write requests; want 0:\n%s", n, o.stderr.String())
	}
	checkStepsOf(t, want, o.stderr.String(), "up to date")

	var so out
	_, err = mgmt.Status(ctx(t), mgmt.StatusOptions{IO: so.io(), Lab: lab, Mgmt: static(bedFor(b.env).client), Output: "json"})
	if err == nil {
		t.Fatal("status says ready while nothing runs Kamaji")
	}
	var r mgmt.Report
	if err := json.Unmarshal(so.stdout.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	rows := map[string]mgmt.ComponentStatus{}
	for _, c := range r.Components {
		rows[c.Name] = c
	}
	for name, reason := range map[string]string{
		"Kamaji": "no Helm release yet", "Kamaji datastore (kamaji-etcd)": "StatefulSet kamaji-system/kamaji-etcd does not exist",
		"ControlPlaneProvider kamaji": "",
	} {
		c, ok := rows[name]
		switch {
		case !ok:
			t.Errorf("status has no row %q: %+v", name, r.Components)
		case c.Ready || c.Installed != "":
			t.Errorf("status row %q = %+v, want not ready and not installed", name, c)
		case !strings.Contains(c.Reason, reason):
			t.Errorf("status row %q says %q, want %q in it", name, c.Reason, reason)
		}
	}
	if c := rows["Kamaji"]; c.Wanted != pins.Kamaji.Version || c.Install != "Helm chart (helm-controller)" {
		t.Errorf("status row Kamaji = %+v", c)
	}
	if c := rows["ControlPlaneProvider kamaji"]; c.Wanted != pins.KamajiControlPlane {
		t.Errorf("status row of the provider = %+v", c)
	}
}

// printedRefs checks that a dry run wrote nothing, and names the objects
// it printed, in order.
func printedRefs(t *testing.T, b *bed, o *out) []string {
	t.Helper()
	if n := b.writes.Load(); n != 0 {
		t.Errorf("the dry run made %d write requests", n)
	}
	objs, err := kube.ParseObjects("stdout", o.stdout.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, obj := range objs {
		refs = append(refs, kube.RefOf(obj).String())
	}
	return refs
}
