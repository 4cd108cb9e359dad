package cluster

import (
	"context"

	"github.com/labctl/labctl/internal/access"
	"github.com/labctl/labctl/internal/kube"
)

// ReadOnlyKubeconfig hands out a kubeconfig of the cluster that can only
// look (package access), where e says, or revokes every one, as r asks.
// It reaches the workload cluster with the admin kubeconfig Cluster API
// keeps, which never leaves this process.
func ReadOnlyKubeconfig(ctx context.Context, o Options, e kube.ExportOptions, r access.Request) error {
	admin, err := Kubeconfig(ctx, o)
	if err != nil {
		return err
	}
	e.Name = ContextName(o.Lab.Metadata.Name, o.Name) + "-readonly"
	return access.Run(ctx, access.Options{
		IO: o.IO, Admin: admin, What: "cluster " + o.Name, From: KubeconfigOrigin(o.Name), DryRun: o.DryRun,
		RevokeCommand: "labctl cluster kubeconfig " + o.Name + " --revoke",
	}, r, e)
}
