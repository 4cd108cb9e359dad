//go:build !provider

package cmd

import (
	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/cmdutil"
)

// providerCmds are none in the CLI's build: the provider's commands are
// the image's (provider.go, -tags provider).
func providerCmds(*cmdutil.Factory) []*cobra.Command { return nil }
