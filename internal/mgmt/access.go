package mgmt

import (
	"context"

	"github.com/labctl/labctl/internal/access"
	"github.com/labctl/labctl/internal/kube"
)

// ReadOnlyKubeconfig hands out a kubeconfig of the management cluster that
// can only look (package access), made with the kubeconfig mgmt up stored,
// or revokes every one, as r asks.
func ReadOnlyKubeconfig(ctx context.Context, o KubeconfigOptions, r access.Request, dryRun bool) error {
	admin, path, err := storedKubeconfig(o.Lab.Metadata.Name)
	if err != nil {
		return err
	}
	name := o.Lab.Metadata.Name
	return access.Run(ctx, access.Options{
		IO: o.IO, Admin: admin, What: "the management cluster of lab " + name, From: kube.FileOrigin(path), DryRun: dryRun,
		RevokeCommand: "labctl mgmt kubeconfig --revoke",
	}, r, kube.ExportOptions{Write: o.Path, Force: o.Force, Merge: o.Merge, Name: "labctl-" + name + "-mgmt-readonly"})
}
