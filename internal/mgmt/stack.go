package mgmt

import (
	"context"
	"fmt"
	"time"

	"github.com/labctl/labctl/internal/cloudinit"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/ui"
)

// StackInstaller is 'labctl mgmt install' as the last step of mgmt up:
// the charts go onto the VM as HelmChart manifests through cloud-init, and
// Install applies the whole stack and waits for it.
type StackInstaller struct {
	IO      *ui.IO
	Verbose int
	// Timeout bounds each component's wait (DefaultTimeout).
	Timeout time.Duration
	// Connect makes the client for the kubeconfig mgmt up stored: the
	// command factory's Connect; tests wrap the client to count writes.
	Connect func(kubeconfig string) (*kube.Client, error)
}

var _ Installer = (*StackInstaller)(nil)

// K3sManifests are the stack's charts as HelmChart objects for k3s's
// auto-deploy folder, the same files 'mgmt install --emit-k3s-manifests'
// writes. They hold no secret.
func (s *StackInstaller) K3sManifests(lab *config.Lab) ([]cloudinit.File, error) {
	files, err := K3sManifests(lab, lab.Management.Stack.OfflineDir)
	if err != nil {
		return nil, fmt.Errorf("the management stack's charts: %w", err)
	}
	return files, nil
}

// Check renders the stack as Install will, so that what Install would
// refuse (a fingerprint-pinned CAPMOX hypervisor, a missing token file)
// is refused before mgmt up makes the VM.
func (s *StackInstaller) Check(lab *config.Lab, dryRun bool) error {
	_, err := buildComponents(lab, "", dryRun)
	return err
}

// Install runs mgmt install against the cluster the kubeconfig reaches.
func (s *StackInstaller) Install(ctx context.Context, lab *config.Lab, kubeconfig string) error {
	c, err := s.Connect(kubeconfig)
	if err != nil {
		return err
	}
	if s.Verbose >= 3 {
		c.LogRequests(s.IO.Err)
	}
	return Install(ctx, InstallOptions{IO: s.IO, Lab: lab, Timeout: s.Timeout, Verbose: s.Verbose,
		Mgmt: func(context.Context) (*kube.Client, error) { return c, nil }})
}
