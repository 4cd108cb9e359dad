package cmd

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/ui"
)

// addOutputFlag adds -o (text, json or yaml) to a command that prints data.
func addOutputFlag(c *cobra.Command, dst *string) {
	c.Flags().StringVarP(dst, "output", "o", "text", "output format: text, json or yaml")
	completeOutput(c, ui.Formats...)
}

// checkOutput rejects an -o value labctl cannot print.
func checkOutput(format string, allowed ...string) error {
	if len(allowed) == 0 {
		allowed = ui.Formats
	}
	for _, f := range allowed {
		if f == format {
			return nil
		}
	}
	return usageError{fmt.Errorf("--output %q: must be one of %s", format, strings.Join(allowed, ", "))}
}

// addDryRunFlag adds --dry-run to a command that changes something, and
// marks it as one (changesThings).
func addDryRunFlag(c *cobra.Command, dst *bool) {
	c.Flags().BoolVar(dst, "dry-run", false, "show what would change, change nothing")
	changesThings(c)
}

// addYesFlag adds --yes to a command that asks before it deletes: only
// there, so --yes never silently means nothing.
func addYesFlag(c *cobra.Command, dst *bool) {
	c.Flags().BoolVarP(dst, "yes", "y", false, "do not ask for confirmation (needed when stdin is not a terminal)")
}

// addKubeconfigExportFlags adds the flags of the commands that hand out a
// kubeconfig: one name for each way, on both.
func addKubeconfigExportFlags(c *cobra.Command, e *kube.ExportOptions) {
	c.Flags().StringVar(&e.Write, "write", "", "write the kubeconfig to this file (mode 0600) instead of printing it")
	c.Flags().BoolVar(&e.Force, "force", false, "overwrite the file --write names")
	c.Flags().BoolVar(&e.Merge, "merge", false, "merge it into ~/.kube/config (mode 0600) as its own context, made current")
	c.MarkFlagsMutuallyExclusive("write", "merge")
}
