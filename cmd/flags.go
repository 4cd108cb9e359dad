package cmd

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

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

// addDryRunFlag adds --dry-run to a command that changes something.
func addDryRunFlag(c *cobra.Command, dst *bool) {
	c.Flags().BoolVar(dst, "dry-run", false, "show what would change, change nothing")
}

// addYesFlag adds --yes to a command that asks before it deletes: only
// there, so --yes never silently means nothing.
func addYesFlag(c *cobra.Command, dst *bool) {
	c.Flags().BoolVarP(dst, "yes", "y", false, "do not ask for confirmation (needed when stdin is not a terminal)")
}
