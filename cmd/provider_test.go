//go:build provider

package cmd

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/provider/libvirt/controller"
	"github.com/labctl/labctl/internal/provider/libvirt/release"
)

// 'provider libvirt' is built only with -tags provider, so its command
// line is table-tested here rather than in seam_test.go.
func TestProviderLibvirtCommandLine(t *testing.T) {
	testCommandLine(t, "provider libvirt", newProviderLibvirtCmd, []cmdCase[controller.Options]{
		{args: nil, want: &controller.Options{HealthAddr: ":9440", Concurrency: 4}},
		{args: []string{"--kubeconfig", "mgmt.kubeconfig", "--namespace", "lab1", "--health-addr", "0",
			"--leader-elect", "--leader-election-namespace", "capl-system", "--concurrency", "8"},
			want: &controller.Options{Kubeconfig: "mgmt.kubeconfig", Namespace: "lab1", HealthAddr: "0",
				LeaderElect: true, LeaderElectionNamespace: "capl-system", Concurrency: 8}},
		{args: []string{"--concurrency", "many"}, err: `invalid argument "many" for "--concurrency" flag`},
		{args: []string{"extra"}, err: `unknown command "extra" for "labctl provider libvirt"`},
	})
}

// The provider's Deployment runs labctl with its own args: they must be
// flags 'labctl provider libvirt' knows.
func TestProviderDeploymentArgsParse(t *testing.T) {
	b, err := release.Components("labctl:test", []string{"linux/amd64"})
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var d struct {
			Kind string
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct{ Args []string }
					}
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind == "Deployment" {
			args = d.Spec.Template.Spec.Containers[0].Args
		}
	}
	if len(args) < 2 || args[0] != "provider" || args[1] != "libvirt" {
		t.Fatalf("the Deployment runs %v, want provider libvirt ...", args)
	}
	if code, _, stderr := run(t, "", append(args, "--help")...); code != 0 {
		t.Fatalf("labctl %s --help: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	if code, _, _ := run(t, "", "provider", "libvirt", "--no-such-flag", "--help"); code != 2 {
		t.Fatalf("an unknown flag exits %d, want 2: the check above could not fail", code)
	}
}
