package cmd

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/configfile"
)

// newConfigValidateCmd hands its run configfile.ValidateOptions, which no
// flag sets; the run adds the streams and the lab's loader.
func newConfigValidateCmd(f *cmdutil.Factory, runF runFunc[configfile.ValidateOptions]) *cobra.Command {
	var o configfile.ValidateOptions
	run := orRun(runF, func(ctx context.Context, o *configfile.ValidateOptions) error {
		o.IO, o.LoadLab = f.IO, f.Lab
		err := configfile.Validate(ctx, *o)
		if errors.Is(err, configfile.ErrInvalid) {
			return codeError{exitError}
		}
		return err
	})
	c := &cobra.Command{
		Use:   "validate",
		Short: "Check lab.yaml and report every problem at once",
		Long: `Check lab.yaml: strict fields, types, addresses, references and secrets.
Every problem is reported at once with its file, line, field path and fix.
Exits 0 when valid, 1 when not.`,
		Example: "  labctl config validate -c examples/lab.yaml\n  labctl config view | labctl config validate -c -",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), &o)
		},
	}
	readsOnly(c)
	return c
}
