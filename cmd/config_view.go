package cmd

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/configfile"
)

// newConfigViewCmd hands its run configfile.ViewOptions with the command
// line's fields set; the run loads the lab.
func newConfigViewCmd(f *cmdutil.Factory, runF runFunc[configfile.ViewOptions]) *cobra.Command {
	var o configfile.ViewOptions
	run := orRun(runF, withLabFrom(f, func(ctx context.Context, lab *config.Lab, src config.Source, o *configfile.ViewOptions) error {
		o.IO, o.Lab, o.Source = f.IO, lab, src
		return configfile.View(ctx, *o)
	}))
	c := &cobra.Command{
		Use:   "view",
		Short: "Print lab.yaml with every default filled in",
		Long: `Print the fully defaulted lab config. Secrets appear only as the env/file
references lab.yaml holds. The output is itself a valid lab.yaml, so it can
be saved or piped back in; which source was read goes to stderr.
'labctl config view > lab.yaml' works: the file stdout goes to is never read
as the config, so the emptied ./lab.yaml gives way to the built-in lab.`,
		Example: "  labctl config view -c examples/lab.yaml\n  labctl config view -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil { // text is the YAML itself
				return err
			}
			return run(cmd.Context(), &o)
		},
	}
	c.Flags().StringVarP(&o.Output, "output", "o", "yaml", "output format: yaml (also text) or json")
	completeOutput(c, "yaml", "json")
	readsOnly(c)
	return c
}
