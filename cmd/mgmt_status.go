package cmd

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/mgmt"
)

func newMgmtStatusCmd(f *cmdutil.Factory) *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "status",
		Short: "Show each management component: wanted and installed version, readiness",
		Long: `Read each component of the management stack back from the cluster: the
version labctl wants, the version installed (the Helm release's chart version,
the Provider's status.installedVersion, the RBAC's version label), whether it
is ready, and why not. Works for charts installed by k3s's helm-controller and
by the Helm SDK alike. Only reads; needs no secret.

Exits 0 when every component is ready, 1 when one is not.`,
		Example: `  labctl mgmt status
  labctl mgmt status --kubeconfig ~/.kube/other -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			lab, _, err := f.Lab(cmd.Context())
			if err != nil {
				return err
			}
			_, err = mgmt.Status(cmd.Context(), mgmt.StatusOptions{
				IO: f.IO, Lab: lab, Mgmt: f.Mgmt, Output: out, Verbose: f.Settings.Verbose,
			})
			if errors.Is(err, mgmt.ErrNotReady) {
				return codeError{exitError}
			}
			return err
		},
	}
	addOutputFlag(c, &out)
	readsOnly(c)
	return c
}
