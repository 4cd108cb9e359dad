//go:build provider

package cmd

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/provider/libvirt/release"
)

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
