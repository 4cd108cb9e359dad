package cmd

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/labctl/labctl/internal/backup"
	"github.com/labctl/labctl/internal/cmdutil"
	"github.com/labctl/labctl/internal/config"
)

// newMgmtBackupCmd hands its run backup.Options with the command line's
// fields set; the run adds what it reaches.
func newMgmtBackupCmd(f *cmdutil.Factory, runF runFunc[backup.Options]) *cobra.Command {
	var o backup.Options
	run := orRun(runF, withLab(f, func(ctx context.Context, lab *config.Lab, o *backup.Options) error {
		o.IO, o.Lab, o.Mgmt = f.IO, lab.Metadata.Name, f.OwnMgmt
		return backup.Backup(ctx, *o)
	}))
	c := &cobra.Command{
		Use:   "backup FILE | --dry-run",
		Short: "Back up the management cluster into one encrypted file",
		Long: `Write everything a new management cluster needs to take over this lab's
clusters into FILE:

  - the Cluster API objects of every cluster (Clusters, control planes,
    MachineDeployments, Machines, the providers' machines, IP addresses,
    and the Secrets that hold each cluster's CA keys and kubeconfig),
    taken with clusterctl's own move to a folder;
  - the providers' config Secrets (spec.configSecret of the operator's
    Provider CRs, e.g. CAPMOX's Proxmox credentials);
  - what labctl made for each cluster beside them: its namespace, the
    libvirt hosts' credentials, the cluster-autoscaler's ServiceAccount,
    ClusterRoleBinding and Deployment.

FILE is encrypted with age, with a passphrase typed twice on the terminal
(or read from $LABCTL_BACKUP_PASSPHRASE), written with mode 0600, and never
written over: an existing FILE is an error.

While it reads a cluster, clusterctl pauses it (its controllers wait) for
a few seconds and unpauses it after, also when the backup fails half way.
It refuses a Cluster that is already paused, and a cluster whose machines
are still being made (wait for them to be Running). Nothing else on the
management cluster changes, except that clusterctl adds its inventory CRD
(providers.clusterctl.cluster.x-k8s.io) when it is missing.

A Kamaji tenant cluster's control plane goes in too: the Secrets Kamaji
keeps beside it (its CAs, service-account key, kubeconfigs) and its keys
in the DataStore (kamaji-etcd), read through the API server's
port-forward to the datastore's Pod as Kamaji's root client. A restore
puts them back before the tenant's control plane is made again, so its
workers still trust it and its objects are there. --skip-tenants leaves
the tenants out.

It reads the management cluster --kubeconfig names, else the one 'mgmt up'
stored for the lab; never $KUBECONFIG, as 'mgmt down'.

Restore it with 'labctl mgmt restore FILE' onto a new management cluster.`,
		Example: `  labctl mgmt backup --dry-run                   # what a backup would hold
  labctl mgmt backup lab-$(date +%F).age          # asks for the passphrase
  LABCTL_BACKUP_PASSPHRASE=... labctl mgmt backup /srv/backups/lab.age
  labctl mgmt backup --skip-tenants lab.age      # every cluster but the Kamaji tenants`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && !o.DryRun {
				return usageError{errors.New("FILE is missing: 'labctl mgmt backup FILE' (or --dry-run to only list what it would hold)")}
			}
			if len(args) == 1 {
				o.File = args[0]
			}
			return run(cmd.Context(), &o)
		},
	}
	addDryRunFlag(c, &o.DryRun)
	c.Flags().BoolVar(&o.SkipTenants, "skip-tenants", false, "leave the Kamaji tenant clusters out (a restore then does not bring them back)")
	return c
}

// newMgmtRestoreCmd hands its run backup.RestoreOptions with the command
// line's fields set; the run adds what it reaches.
func newMgmtRestoreCmd(f *cmdutil.Factory, runF runFunc[backup.RestoreOptions]) *cobra.Command {
	var o backup.RestoreOptions
	run := orRun(runF, func(ctx context.Context, o *backup.RestoreOptions) error {
		// The lab must load: its name picks the stored kubeconfig.
		if _, _, err := f.Lab(ctx); err != nil {
			return err
		}
		o.IO, o.Mgmt = f.IO, f.OwnMgmt
		return backup.Restore(ctx, *o)
	})
	c := &cobra.Command{
		Use:   "restore FILE",
		Short: "Restore a backup onto a new management cluster",
		Long: `Put the clusters of a 'labctl mgmt backup' FILE onto a new management
cluster, for example one 'labctl mgmt up' just made on a fresh VM, so that
every cluster goes on as it was: no VM is cloned or deleted, the providers
find each Machine's VM from what its objects record (a ProxmoxMachine's VM
id, a LibvirtMachine's providerID), and the autoscalers run again.

In order: the namespaces, credentials and provider config Secrets (a
Secret the target already has is kept: the target's is newer); the
Cluster API objects, through clusterctl's move from a folder, which
unpauses the Clusters at its end; a wait until every Machine has its Node
again (--timeout); then the autoscalers.

It refuses a management cluster that already manages any of the backup's
clusters, and names them. A restore that stopped half way (Ctrl-C, a
timeout) resumes when run again: it recognises the Clusters it made from
this backup. --dry-run opens the file, checks the target and lists what
would be made, changing nothing.

Shut the old management cluster down first: two management clusters
acting on the same VMs would fight over them. The target is the cluster
--kubeconfig names, else the one 'mgmt up' stored for the lab; never
$KUBECONFIG.

The passphrase is asked on the terminal, or read from
$LABCTL_BACKUP_PASSPHRASE.`,
		Example: `  labctl mgmt up                                  # a fresh management VM
  labctl mgmt restore --dry-run lab-2026-12-01.age
  labctl mgmt restore lab-2026-12-01.age
  labctl scale-test lab1                          # the autoscaler works as before`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.File = args[0]
			return run(cmd.Context(), &o)
		},
	}
	addDryRunFlag(c, &o.DryRun)
	c.Flags().DurationVar(&o.AdoptTimeout, "timeout", backup.DefaultAdoptTimeout, "bound on the wait for every Machine to have its Node again")
	return c
}
