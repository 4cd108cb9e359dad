package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/configfile"
)

func newConfigViewCmd(f *cmdutil.Factory) *cobra.Command {
	var out string
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
			if err := checkOutput(out); err != nil { // text is the YAML itself
				return err
			}
			lab, src, err := f.Lab(cmd.Context())
			if err != nil {
				return err
			}
			return configfile.View(cmd.Context(), configfile.ViewOptions{IO: f.IO, Lab: lab, Source: src, Output: out})
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "yaml", "output format: yaml (also text) or json")
	completeOutput(c, "yaml", "json")
	readsOnly(c)
	return c
}
