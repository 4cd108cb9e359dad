package cmd

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/access"
)

// readOnlyFlags are the flags of the kubeconfig commands that hand out
// read-only access instead of the admin kubeconfig.
type readOnlyFlags struct {
	readOnly, revoke, dryRun bool
	ttl                      time.Duration
}

func (r *readOnlyFlags) on() bool { return r.readOnly || r.revoke }

func (r *readOnlyFlags) request() access.Request {
	return access.Request{TTL: r.ttl, Revoke: r.revoke}
}

func addReadOnlyFlags(c *cobra.Command, r *readOnlyFlags) {
	c.Flags().BoolVar(&r.readOnly, "read-only", false, "a kubeconfig that can only look: ServiceAccount "+access.Namespace+"/"+access.Name+" bound to ClusterRole view (no Secrets), with a token that expires")
	c.Flags().DurationVar(&r.ttl, "ttl", access.DefaultTTL, "with --read-only: how long the token lasts (at least 10m, the API server's minimum)")
	c.Flags().BoolVar(&r.revoke, "revoke", false, "delete the read-only ServiceAccount and its binding: every read-only token handed out stops working at once")
	c.Flags().BoolVar(&r.dryRun, "dry-run", false, "with --read-only or --revoke: show what would change, change nothing")
	changesThings(c)
}

// check refuses flags that mean nothing without --read-only or --revoke.
func (r *readOnlyFlags) check(c *cobra.Command) error {
	if r.readOnly && r.revoke {
		return usageError{fmt.Errorf("--read-only makes a token and --revoke ends them all; pass one")}
	}
	if r.on() {
		if r.readOnly {
			if err := access.CheckTTL(r.ttl); err != nil {
				return usageError{err}
			}
		}
		return nil
	}
	for _, name := range []string{"ttl", "dry-run"} {
		if c.Flags().Changed(name) {
			return usageError{fmt.Errorf("--%s needs --read-only (or --revoke)", name)}
		}
	}
	return nil
}
