// Package cmdutil hands every command what it needs, on gh's
// pkg/cmdutil/factory.go model: a Factory of lazy functions, so a command
// that never needs the management cluster never connects to one, and tests
// swap any of them for a fake.
package cmdutil

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"k8s.io/client-go/rest"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/ui"
)

// Settings are the global flags the Factory's functions read. The root
// command fills them in before any command runs; the functions read them
// when called, never when the Factory is made.
type Settings struct {
	// Config is --config/-c (or LABCTL_CONFIG): a file, or "-" for stdin.
	Config string
	// ConfigExplicit is true when the user named Config; then a missing
	// file is an error instead of the built-in example.
	ConfigExplicit bool
	// Kubeconfig is --kubeconfig: the management cluster's kubeconfig;
	// empty means the one mgmt up stored for the lab.
	Kubeconfig string
	Verbose    int
}

// Factory is handed to every command. Each function is lazy and, where it
// makes something (the lab, the management client), makes it once.
type Factory struct {
	IO       *ui.IO
	Settings *Settings

	// Lab loads, defaults and validates lab.yaml once.
	Lab func(ctx context.Context) (*config.Lab, config.Source, error)
	// Driver opens the hypervisor of the lab called name. Close it with
	// drivers.Close when done.
	Driver func(ctx context.Context, name string) (hypervisor.Driver, error)
	// Connect makes a client for the cluster a kubeconfig file reaches:
	// the one place labctl turns a kubeconfig into a client.
	Connect func(kubeconfig string) (*kube.Client, error)
	// Mgmt is the management cluster: --kubeconfig (or LABCTL_KUBECONFIG),
	// else $KUBECONFIG, else the kubeconfig mgmt up stored for the lab
	// (kube.MgmtKubeconfig). Without any it returns an error that wraps
	// kube.ErrNoMgmt.
	Mgmt func(ctx context.Context) (*kube.Client, error)
	// OwnMgmt is the lab's own management cluster: --kubeconfig, else the
	// kubeconfig mgmt up stored, never $KUBECONFIG (mgmt down, which must
	// not list or delete the Clusters of whatever $KUBECONFIG points at).
	OwnMgmt func(ctx context.Context) (*kube.Client, error)
	// Workload is the REST config of a workload cluster, from the
	// kubeconfig secret Cluster API keeps in the management cluster.
	Workload func(ctx context.Context, cluster string) (*rest.Config, error)
}

// New returns the Factory labctl runs with: the real config loader,
// drivers and clients, reading the global flags from s.
func New(io *ui.IO, s *Settings) *Factory {
	f := &Factory{IO: io, Settings: s, Connect: kube.Connect}
	f.Lab = onceLab(func(ctx context.Context) (*config.Lab, config.Source, error) {
		return config.Load(ctx, config.Request{Path: s.Config, Explicit: s.ConfigExplicit, Stdin: io.In, Output: outputFile(io)})
	})
	f.Driver = func(ctx context.Context, name string) (hypervisor.Driver, error) {
		lab, _, err := f.Lab(ctx)
		if err != nil {
			return nil, err
		}
		return drivers.OpenLogged(ctx, lab, name, f.IO.Err, s.Verbose)
	}
	f.Mgmt = onceClient(func(ctx context.Context) (*kube.Client, error) { return f.mgmt(ctx) })
	f.OwnMgmt = onceClient(func(ctx context.Context) (*kube.Client, error) { return f.connectMgmt(ctx, kube.OwnMgmtKubeconfig) })
	f.Workload = func(ctx context.Context, name string) (*rest.Config, error) {
		mc, err := f.Mgmt(ctx)
		if err != nil {
			return nil, err
		}
		kc, err := cluster.Kubeconfig(ctx, cluster.Options{Mgmt: mc, Name: name})
		if err != nil {
			return nil, err
		}
		return cluster.WorkloadConfig(kc, name)
	}
	return f
}

func (f *Factory) mgmt(ctx context.Context) (*kube.Client, error) {
	return f.connectMgmt(ctx, kube.MgmtKubeconfig)
}

// connectMgmt connects to the management cluster the way pick chooses its
// kubeconfig (kube.MgmtKubeconfig, or kube.OwnMgmtKubeconfig for mgmt
// down), saying so when $KUBECONFIG won over the stored one.
func (f *Factory) connectMgmt(ctx context.Context, pick func(explicit, lab string) (kube.Mgmt, error)) (*kube.Client, error) {
	lab, _, err := f.Lab(ctx)
	if err != nil {
		return nil, err
	}
	m, err := pick(f.Settings.Kubeconfig, lab.Metadata.Name)
	if err != nil {
		return nil, err
	}
	if m.Note != "" {
		fmt.Fprintln(f.IO.Err, f.IO.Styles(f.IO.Err).Warn(m.Note))
	}
	c, err := m.ConnectWith(f.Connect)
	if err != nil {
		return nil, err
	}
	if f.Settings.Verbose >= 3 {
		c.LogRequests(f.IO.Err)
	}
	return c, nil
}

// onceLab remembers the first load, error included: every caller in one
// run sees the same lab (stdin can be read only once).
func onceLab(load func(context.Context) (*config.Lab, config.Source, error)) func(context.Context) (*config.Lab, config.Source, error) {
	var (
		mu   sync.Mutex
		done bool
		lab  *config.Lab
		src  config.Source
		err  error
	)
	return func(ctx context.Context) (*config.Lab, config.Source, error) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			lab, src, err = load(ctx)
			// A load that ctx ended may be tried again with a live ctx.
			done = ctx.Err() == nil
		}
		return lab, src, err
	}
}

// onceClient remembers the first client made; an error is not kept, so a
// later call can try again.
func onceClient(make func(context.Context) (*kube.Client, error)) func(context.Context) (*kube.Client, error) {
	var (
		mu sync.Mutex
		c  *kube.Client
	)
	return func(ctx context.Context) (*kube.Client, error) {
		mu.Lock()
		defer mu.Unlock()
		if c != nil {
			return c, nil
		}
		var err error
		c, err = make(ctx)
		return c, err
	}
}

// ClusterOptions are what every cluster command shares: the lab, the
// cluster's name and the management cluster. With inLab the name must be
// one of lab.yaml's clusters, which is checked before any connection is
// made (delete, scale and the read commands also reach clusters that have
// since left lab.yaml). A dry run that cannot reach the management
// cluster says why it needs one.
func (f *Factory) ClusterOptions(ctx context.Context, name string, inLab, dryRun bool) (cluster.Options, error) {
	lab, _, err := f.Lab(ctx)
	if err != nil {
		return cluster.Options{}, err
	}
	if inLab {
		if _, err := lab.Cluster(name); err != nil {
			return cluster.Options{}, err
		}
	}
	mc, err := f.Mgmt(ctx)
	switch {
	case err != nil && dryRun && inLab:
		return cluster.Options{}, fmt.Errorf("the dry run compares with the management cluster, so it needs one: %w; 'labctl cluster create %s --dry-run -o yaml' prints the objects without one", err, name)
	case err != nil && dryRun:
		return cluster.Options{}, fmt.Errorf("the dry run reads the cluster from the management cluster, so it needs one: %w", err)
	case err != nil:
		return cluster.Options{}, err
	}
	return cluster.Options{IO: f.IO, Lab: lab, Name: name, Mgmt: mc, DryRun: dryRun, Verbose: f.Settings.Verbose}, nil
}

// outputFile is the regular file stdout is redirected into, if it is one:
// 'labctl config view > lab.yaml' has the shell empty ./lab.yaml before
// labctl starts, so the loader must not read that file as the config.
func outputFile(io *ui.IO) fs.FileInfo {
	f, ok := io.Out.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	return fi
}
