package mgmt

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/cloudinit"
	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// EmitOptions are the inputs of EmitK3sManifests.
type EmitOptions struct {
	IO  *ui.IO
	Lab *config.Lab
	// Dir receives the files; it is created when missing.
	Dir        string
	OfflineDir string
}

// EmitK3sManifests writes the stack's charts as HelmChart manifests for
// k3s's auto-deploy folder (/var/lib/rancher/k3s/server/manifests), one
// file per chart, and returns their paths. They hold no secret: the
// Proxmox token goes in later, through 'mgmt install'. Writing the same
// files again changes nothing.
func EmitK3sManifests(o EmitOptions) ([]string, error) {
	if o.Lab == nil {
		return nil, errors.New("writing k3s manifests: no lab config")
	}
	if o.Dir == "" {
		return nil, errors.New("writing k3s manifests: no folder given")
	}
	manifests, err := K3sManifests(o.Lab, o.OfflineDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("writing k3s manifests: %w", err)
	}
	var files []string
	for _, m := range manifests {
		path := filepath.Join(o.Dir, m.Path)
		if old, err := os.ReadFile(path); err != nil || !bytes.Equal(old, m.Content) {
			if err := os.WriteFile(path, m.Content, 0o644); err != nil {
				return files, fmt.Errorf("writing k3s manifests: %w", err)
			}
		}
		files = append(files, path)
		fmt.Fprintln(o.IO.Out, path)
	}
	fmt.Fprintln(o.IO.Err, o.IO.Styles(o.IO.Err).OK(fmt.Sprintf("wrote %d HelmChart manifest(s) to %s; copy them to /var/lib/rancher/k3s/server/manifests on the k3s server", len(files), o.Dir)))
	return files, nil
}

// K3sManifests are the stack's charts as HelmChart manifests for k3s's
// auto-deploy folder, one file per chart (its path relative to the
// folder), charts from offlineDir when set. They hold no secret: the
// Proxmox token goes in later, through 'mgmt install'. mgmt up puts them
// on the VM with cloud-init, and 'mgmt install --emit-k3s-manifests'
// writes them to a folder.
func K3sManifests(lab *config.Lab, offlineDir string) ([]cloudinit.File, error) {
	comps, err := components.Build(lab, versions.MustGet(), components.Options{OfflineDir: offlineDir, LocalFiles: components.SkipLocalFiles})
	if err != nil {
		return nil, err
	}
	var files []cloudinit.File
	for _, c := range comps {
		if c.Chart == nil {
			continue
		}
		obj, err := c.Chart.HelmChart()
		if err != nil {
			return nil, err
		}
		data, err := kube.MarshalYAML([]*unstructured.Unstructured{obj})
		if err != nil {
			return nil, err
		}
		data = append([]byte(fmt.Sprintf("# %s %s for k3s's helm-controller, written by labctl.\n", c.Name, c.Version)), data...)
		files = append(files, cloudinit.File{Path: "labctl-" + c.Chart.Release.Name + ".yaml", Content: data})
	}
	return files, nil
}
