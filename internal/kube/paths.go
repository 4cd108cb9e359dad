package kube

import (
	"github.com/labctl/labctl/internal/files"
)

// MgmtKubeconfigFile is the name of the stored management-cluster
// kubeconfig inside a lab's state folder.
const MgmtKubeconfigFile = "mgmt.kubeconfig"

// MgmtKubeconfigPath is where labctl stores the management cluster's
// kubeconfig for lab: $XDG_CONFIG_HOME/labctl/<lab>/mgmt.kubeconfig.
func MgmtKubeconfigPath(lab string) (string, error) {
	return files.StatePath(lab, MgmtKubeconfigFile)
}
