package cmd

import (
	"fmt"

	"github.com/spf13/cobra"
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
