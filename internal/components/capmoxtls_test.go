package components_test

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/upstream"
	"github.com/labctl/labctl/internal/versions"
)

func capmoxOf(t *testing.T, cs []components.Component) components.Component {
	t.Helper()
	for _, c := range cs {
		if c.Provider != nil && c.Provider.Name == "proxmox" {
			return c
		}
	}
	t.Fatal("the stack has no CAPMOX provider")
	return components.Component{}
}

// managerArgs are the args the Provider CR gives CAPMOX's manager container.
func managerArgs(t *testing.T, cr *unstructured.Unstructured) map[string]string {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(cr.Object, "spec", "deployment", "containers")
	for _, c := range cs {
		m := c.(map[string]any)
		if m["name"] == "manager" {
			args, _, _ := unstructured.NestedStringMap(m, "args")
			return args
		}
	}
	return nil
}

// The owner's lab trusts PVE through tls.caFile: CAPMOX's manager, as
// cluster-api-operator v0.28.0 makes its Deployment from labctl's Provider
// CR, verifies TLS (--proxmox-insecure=false; CAPMOX v0.9.0 defaults to
// true) against a file that holds exactly the lab's CA, mounted from the
// ConfigMap labctl renders beside it.
func TestCAPMOXVerifiesAgainstTheLabCA(t *testing.T) {
	t.Setenv("PVE_TOKEN_SECRET", secret)
	lab := load(t, "../../examples/lab.yaml")
	caPEM, err := os.ReadFile(filepath.Join(os.Getenv("HOME"), testbed.ExampleCAFile))
	if err != nil {
		t.Fatal(err)
	}
	c := capmoxOf(t, build(t, lab, components.Options{}))
	cr := providerCR(t, c)
	args := managerArgs(t, cr)
	if args["--proxmox-insecure"] != "false" || args["--proxmox-root-cert-file"] == "" {
		t.Fatalf("CAPMOX's manager args = %v, want --proxmox-insecure=false and --proxmox-root-cert-file", args)
	}
	configMaps := map[string]map[string]string{}
	for _, o := range c.Objects {
		if o.GetKind() == "ConfigMap" {
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			configMaps[o.GetName()] = data
			if o.GetNamespace() != c.Provider.Namespace {
				t.Errorf("ConfigMap %s is in namespace %q, want CAPMOX's %s", o.GetName(), o.GetNamespace(), c.Provider.Namespace)
			}
		}
	}

	// The release Deployment, customized as the operator does.
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	spec, _, _ := unstructured.NestedMap(cr.Object, "spec")
	d, err := upstream.DeploymentAsOperator(t.Context(), root, "capmox", spec)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != components.CAPMOXDeployment {
		t.Errorf("CAPMOX's Deployment is %s, labctl's patch targets %s", d.Name, components.CAPMOXDeployment)
	}
	var manager *corev1.Container
	for i := range d.Spec.Template.Spec.Containers {
		if d.Spec.Template.Spec.Containers[i].Name == "manager" {
			manager = &d.Spec.Template.Spec.Containers[i]
		}
	}
	if manager == nil {
		t.Fatal("no manager container")
	}
	for _, w := range []string{"--proxmox-insecure=false", "--proxmox-root-cert-file=" + args["--proxmox-root-cert-file"]} {
		if !slices.Contains(manager.Args, w) {
			t.Errorf("the manager's args %v lack %s", manager.Args, w)
		}
	}
	// The file the flag names is a key of a ConfigMap labctl renders,
	// holding the lab's CA.
	file := args["--proxmox-root-cert-file"]
	var got string
	var found, webhookCert bool
	for _, m := range manager.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			if v.Secret != nil && v.Secret.SecretName == "webhook-server-cert" {
				webhookCert = true
			}
			if v.ConfigMap != nil && path.Dir(file) == path.Clean(m.MountPath) {
				got, found = configMaps[v.ConfigMap.Name][path.Base(file)]
			}
		}
	}
	if !found {
		t.Fatalf("no ConfigMap labctl renders is mounted at %s in CAPMOX's Deployment (mounts %v, volumes %v, ConfigMaps %v)",
			file, manager.VolumeMounts, d.Spec.Template.Spec.Volumes, configMaps)
	}
	if got != string(caPEM) {
		t.Errorf("%s holds %q, want the lab's caFile", file, got)
	}
	if !webhookCert {
		t.Error("the patch lost CAPMOX's webhook certificate mount")
	}
}

// With SkipLocalFiles (status, emitted manifests) the Provider CR still
// turns verification on and names the CA, but no file is read.
func TestCAPMOXVerificationWithoutFiles(t *testing.T) {
	lab := load(t, "../../examples/lab.yaml")
	if err := os.Remove(filepath.Join(os.Getenv("HOME"), testbed.ExampleCAFile)); err != nil {
		t.Fatal(err)
	}
	c := capmoxOf(t, build(t, lab, components.Options{LocalFiles: components.SkipLocalFiles}))
	if args := managerArgs(t, providerCR(t, c)); args["--proxmox-insecure"] != "false" || args["--proxmox-root-cert-file"] == "" {
		t.Errorf("CAPMOX's manager args with SkipLocalFiles = %v", args)
	}
	for _, o := range c.Objects {
		if o.GetKind() == "ConfigMap" {
			t.Errorf("ConfigMap %s rendered without reading files", o.GetName())
		}
	}
}

// The other ways a lab can trust PVE, as CAPMOX gets them.
func TestCAPMOXTLSOfEachTrust(t *testing.T) {
	t.Setenv("PVE_TOKEN_SECRET", secret)
	for _, tc := range []struct {
		name string
		tls  config.TLS
		want map[string]string
		err  string
	}{
		{name: "system roots", want: map[string]string{"--proxmox-insecure": "false"}},
		{name: "insecureSkipVerify", tls: config.TLS{InsecureSkipVerify: true}, want: map[string]string{"--proxmox-insecure": "true"}},
		{name: "fingerprint", tls: config.TLS{Fingerprint: strings.Repeat("AB:", 31) + "AB"},
			err: "hypervisors[pve].proxmox.tls.fingerprint: CAPMOX (the management cluster's Proxmox provider) cannot pin a certificate fingerprint, only verify against CA certificates; " +
				"set hypervisors[pve].proxmox.tls.caFile to the Proxmox cluster's CA instead (copy /etc/pve/pve-root-ca.pem from a node) and drop fingerprint"},
		{name: "caFile not there", tls: config.TLS{CAFile: "/nonexistent/pve-root-ca.pem"},
			err: "hypervisors[pve].proxmox.tls.caFile: reading the CA file: open /nonexistent/pve-root-ca.pem: no such file or directory (copy /etc/pve/pve-root-ca.pem from the node)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lab := load(t, "../../examples/lab.yaml")
			lab.Hypervisors[0].Proxmox.TLS = tc.tls
			cs, err := components.Build(lab, versions.MustGet(), components.Options{})
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v\nwant %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := capmoxOf(t, cs)
			cr := providerCR(t, c)
			got := managerArgs(t, cr)
			if len(got) != len(tc.want) {
				t.Errorf("args = %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("args = %v, want %v", got, tc.want)
				}
			}
			patches, _, _ := unstructured.NestedSlice(cr.Object, "spec", "patches")
			for _, p := range patches {
				if kind, _, _ := unstructured.NestedString(p.(map[string]any), "target", "kind"); kind == "Deployment" {
					t.Error("a patch of the Deployment without a CA to mount")
				}
			}
		})
	}
}
