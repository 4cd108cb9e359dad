package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
)

// completeOutput offers the -o values a command takes.
func completeOutput(c *cobra.Command, formats ...string) {
	_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp))
}

// labNames completes the first argument with names from lab.yaml (read
// through the factory, so -c and LABCTL_CONFIG count); a lab that does
// not load completes nothing rather than printing an error into the shell.
func labNames(f *cmdutil.Factory, names func(*config.Lab) []string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		lab, _, err := f.Lab(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return names(lab), cobra.ShellCompDirectiveNoFileComp
	}
}

func clusterNames(lab *config.Lab) []string {
	var out []string
	for _, c := range lab.Clusters {
		out = append(out, c.Name)
	}
	return out
}

func imageNames(lab *config.Lab) []string {
	var out []string
	for _, i := range lab.Images {
		out = append(out, i.Name)
	}
	return out
}
