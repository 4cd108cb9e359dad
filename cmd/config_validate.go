package cmd

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/configfile"
)

func newConfigValidateCmd(f *cmdutil.Factory) *cobra.Command {
	c := &cobra.Command{
		Use:   "validate",
		Short: "Check lab.yaml and report every problem at once",
		Long: `Check lab.yaml: strict fields, types, addresses, references and secrets.
Every problem is reported at once with its file, line, field path and fix.
Exits 0 when valid, 1 when not.`,
		Example: "  labctl config validate -c examples/lab.yaml\n  labctl config view | labctl config validate -c -",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := configfile.Validate(cmd.Context(), configfile.ValidateOptions{IO: f.IO, LoadLab: f.Lab})
			if errors.Is(err, configfile.ErrInvalid) {
				return codeError{exitError}
			}
			return err
		},
	}
	readsOnly(c)
	return c
}
