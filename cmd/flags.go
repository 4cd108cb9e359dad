package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/kube"
)

// output formats for -o.
var outputFormats = []string{"text", "json", "yaml"}

// addOutputFlag adds -o to a command that prints data.
func addOutputFlag(c *cobra.Command, dst *string) {
	c.Flags().StringVarP(dst, "output", "o", "text", "output format: text, json or yaml")
	_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
}

// checkOutput rejects an -o value labctl cannot print.
func checkOutput(format string) error {
	for _, f := range outputFormats {
		if f == format {
			return nil
		}
	}
	return usageError{fmt.Errorf("--output %q: must be one of text, json, yaml", format)}
}

// changeFlags are what every command that changes anything takes.
type changeFlags struct {
	DryRun bool
	Yes    bool
}

func addChangeFlags(c *cobra.Command, f *changeFlags) {
	c.Flags().BoolVar(&f.DryRun, "dry-run", false, "show what would change, change nothing")
	c.Flags().BoolVarP(&f.Yes, "yes", "y", false, "do not ask for confirmation")
}

// addKubeconfigExportFlags adds the flags of the commands that hand out a
// kubeconfig: one name for each way, on both.
func addKubeconfigExportFlags(c *cobra.Command, e *kube.ExportOptions) {
	c.Flags().StringVar(&e.Write, "write", "", "write the kubeconfig to this file (mode 0600) instead of printing it")
	c.Flags().BoolVar(&e.Force, "force", false, "overwrite the file --write names")
	c.Flags().BoolVar(&e.Merge, "merge", false, "merge it into ~/.kube/config (mode 0600) as its own context, made current")
	c.MarkFlagsMutuallyExclusive("write", "merge")
}
