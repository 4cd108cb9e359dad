package testbed

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/kube"
)

// OwnerLab is the repository's examples/lab.yaml (the owner's lab) with
// its Proxmox hypervisor aimed at url, a loopback fake, and the token
// secret in PVE_TOKEN_SECRET for the test. edit changes the YAML tree
// (doc, and pve, the hypervisor's proxmox section) before it is written
// out; the result is for config.Parse.
func OwnerLab(t testing.TB, url, secret string, edit func(doc, pve map[string]any)) []byte {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "examples", "lab.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return EditLab(t, raw, url, secret, edit)
}

// EditLab is OwnerLab on the lab.yaml raw, whose first hypervisor is a
// Proxmox one.
func EditLab(t testing.TB, raw []byte, url, secret string, edit func(doc, pve map[string]any)) []byte {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	pve := doc["hypervisors"].([]any)[0].(map[string]any)["proxmox"].(map[string]any)
	pve["url"] = url
	if edit != nil {
		edit(doc, pve)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PVE_TOKEN_SECRET", secret)
	return out
}

// CountingClient is a client of env whose writes (kube.IsWrite) are
// counted, as a new labctl run would have.
func CountingClient(env *Env) (*kube.Client, *atomic.Int64) {
	c := kube.NewForConfig(env.Config, env.Kubeconfig)
	var n atomic.Int64
	c.WrapTransport(CountWrites(&n))
	return c, &n
}

// CountWrites wraps a transport so that n counts the requests that change
// state (kube.IsWrite).
func CountWrites(n *atomic.Int64) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if kube.IsWrite(r) {
				n.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// ExampleTenant is the cluster name's entry in examples/lab-tenants.yaml,
// with port as its controlPlane.port, for a test lab to insert before its
// scaleTest section: the example is what the box and the sim run.
func ExampleTenant(t testing.TB, name string, port int) string {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(root, "examples", "lab-tenants.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	start := strings.Index(s, "  - name: "+name+"\n")
	if start < 0 {
		t.Fatalf("examples/lab-tenants.yaml has no cluster %s", name)
	}
	end := strings.Index(s[start+1:], "\n  - name: ")
	if next := strings.Index(s[start+1:], "\nscaleTest:"); end < 0 || next >= 0 && next < end {
		end = next
	}
	block := s[start : start+1+end+1]
	// The comment above the next cluster belongs to it.
	if i := strings.LastIndex(strings.TrimRight(block, "\n"), "\n  # "); i >= 0 {
		block = block[:i+1]
	}
	lines := strings.Split(block, "\n")
	found := false
	for i, l := range lines {
		if k, _, ok := strings.Cut(l, "port:"); ok && strings.TrimSpace(k) == "" {
			lines[i], found = k+"port: "+strconv.Itoa(port), true
		}
	}
	if !found {
		t.Fatalf("examples/lab-tenants.yaml's %s has no controlPlane.port", name)
	}
	return strings.Join(lines, "\n")
}
