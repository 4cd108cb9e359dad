package testbed

import (
	"net/http"
	"os"
	"path/filepath"
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
