// Package backup is 'labctl mgmt backup' and 'labctl mgmt restore': the
// management cluster's Cluster API objects, taken with clusterctl's move
// to a folder and put back with its move from one, plus what labctl adds
// beside them (Parts), in one age-encrypted file.
package backup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// Options are the inputs of 'labctl mgmt backup'.
type Options struct {
	IO *ui.IO
	// Lab is the lab's name, kept in the manifest.
	Lab string
	// Mgmt reaches the management cluster to back up.
	Mgmt func(ctx context.Context) (*kube.Client, error)
	File string
	// DryRun lists what the backup would hold; it pauses nothing and
	// writes nothing.
	DryRun bool
	// Passphrase returns the passphrase; nil asks as Passphrase does.
	Passphrase func() (string, error)
	// SkipTenants leaves the Kamaji tenant clusters out (their
	// datastore need not be reachable then).
	SkipTenants bool
	// Parts are what the backup holds beside clusterctl's objects; nil
	// means Parts().
	Parts []Part
	// workFactor is age's scrypt work factor; 0 is age's default (2^18).
	workFactor int
}

// Backup writes the management cluster's Cluster API objects and labctl's
// parts into a new age-encrypted file.
//
// clusterctl's move to a folder pauses each Cluster while it reads it and
// unpauses it after (mover.go toDirectory): a backup must leave the source
// running as it found it, so Backup refuses a Cluster someone else paused
// (it could not tell their pause from its own) and, when clusterctl fails
// half way, unpauses the Clusters it paused itself.
func Backup(ctx context.Context, o Options) error {
	if o.Parts == nil {
		o.Parts = Parts()
	}
	if !o.DryRun {
		// Before the passphrase is asked for: a taken name fails at once.
		if _, err := os.Lstat(o.File); err == nil {
			return fmt.Errorf("%s already exists: a backup never overwrites a file; choose a new name, or remove the old file first", o.File)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("checking %s: %w", o.File, err)
		}
	}
	src, err := o.Mgmt(ctx)
	if err != nil {
		return err
	}
	clusters, err := listClusters(ctx, src)
	if err != nil {
		return err
	}
	if len(clusters) == 0 {
		fmt.Fprintf(o.IO.Err, "no Cluster API cluster on %s: the backup holds only labctl's parts\n", src.Host())
	}
	clusters, skipped, err := leaveOutTenants(o, clusters)
	if err != nil {
		return err
	}
	if paused := pausedOf(clusters); len(paused) > 0 {
		return fmt.Errorf("cannot back up %s: Cluster %s is paused (spec.paused or the cluster.x-k8s.io/paused annotation); clusterctl pauses each Cluster while it reads it and refuses one already paused, and labctl would not know to leave it paused after. Unpause it, or wait for whatever paused it (a clusterctl move, an upgrade) to finish", src.Host(), strings.Join(paused, ", "))
	}
	m, err := newMover(ctx)
	if err != nil {
		return err
	}
	if o.DryRun {
		return planBackup(ctx, o, src, m, clusters)
	}

	pass := o.Passphrase
	if pass == nil {
		pass = func() (string, error) { return Passphrase(o.IO, o.File, true) }
	}
	passphrase, err := pass()
	if err != nil {
		return err
	}
	f, err := createExclusive(o.File)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(o.File)
		}
	}()

	a, err := collect(ctx, o, src, m, clusters)
	if err != nil {
		return err
	}
	a.Manifest.SkippedTenants = skipped
	if err := writeArchive(f, a, passphrase, o.workFactor); err != nil {
		return err
	}
	done = true
	objs := len(a.Under(clusterctlTo))
	fmt.Fprintf(o.IO.Err, "%s written (mode 0600, age-encrypted with the passphrase): %d cluster(s), %d Cluster API object(s), parts %s\n",
		o.File, len(clusters), objs, strings.Join(a.Manifest.Parts, ", "))
	fmt.Fprintln(o.IO.Err, "It holds the clusters' CA keys and kubeconfigs: keep it, and its passphrase, as safe as an admin kubeconfig.")
	return nil
}

// sourceCluster is a Cluster as Backup found it.
type sourceCluster struct {
	ClusterRef
	paused bool
	// tenant: its control plane is Kamaji's (docs/tenants.md).
	tenant bool
}

// leaveOutTenants, with o.SkipTenants, returns the clusters but the
// Kamaji tenants, whose control planes (Secrets Kamaji keeps and their
// keys in the DataStore, the tenants part) the backup then does not take.
// clusterctl moves a namespace whole, so a tenant that shares its
// namespace with another cluster cannot be left out.
func leaveOutTenants(o Options, cs []sourceCluster) (kept []sourceCluster, skipped []ClusterRef, err error) {
	if !o.SkipTenants {
		return cs, nil, nil
	}
	for _, c := range cs {
		if c.tenant {
			skipped = append(skipped, c.ClusterRef)
		} else {
			kept = append(kept, c)
		}
	}
	if len(skipped) == 0 {
		return cs, nil, nil
	}
	names := make([]string, len(skipped))
	for i, c := range skipped {
		names[i] = c.String()
	}
	for _, t := range skipped {
		for _, c := range kept {
			if c.Namespace == t.Namespace {
				return nil, nil, fmt.Errorf("cannot leave tenant %s out: namespace %s also holds cluster %s, and clusterctl moves a namespace whole; move one of them to a namespace of its own", t, t.Namespace, c)
			}
		}
	}
	fmt.Fprintf(o.IO.Err, "leaving out Kamaji tenant(s) %s (--skip-tenants): a restore of this backup will not bring them back\n", strings.Join(names, ", "))
	return kept, skipped, nil
}

func listClusters(ctx context.Context, src *kube.Client) ([]sourceCluster, error) {
	served, err := src.Serves(clusterapi.ClusterGVK)
	if err != nil {
		return nil, fmt.Errorf("asking %s for Cluster API: %w", src.Host(), err)
	}
	if !served {
		return nil, fmt.Errorf("%s serves no Cluster API Clusters (%s): is it a management cluster? 'labctl mgmt status' says what is installed", src.Host(), clusterapi.ClusterGVK.GroupVersion())
	}
	list, err := src.List(ctx, clusterapi.ClusterGVK, "", "")
	if err != nil {
		return nil, fmt.Errorf("listing the Clusters on %s: %w", src.Host(), err)
	}
	out := make([]sourceCluster, 0, len(list))
	for i := range list {
		c := &list[i]
		paused, _, _ := unstructured.NestedBool(c.Object, "spec", "paused")
		_, annotated := c.GetAnnotations()[pausedAnnotation]
		out = append(out, sourceCluster{ClusterRef: ClusterRef{Namespace: c.GetNamespace(), Name: c.GetName()}, paused: paused || annotated, tenant: clusterapi.IsTenant(c)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// pausedAnnotation is Cluster API's clusterv1.PausedAnnotation.
const pausedAnnotation = "cluster.x-k8s.io/paused"

func pausedOf(cs []sourceCluster) []string {
	var out []string
	for _, c := range cs {
		if c.paused {
			out = append(out, c.String())
		}
	}
	return out
}

func refsOf(cs []sourceCluster) []ClusterRef {
	out := make([]ClusterRef, len(cs))
	for i, c := range cs {
		out[i] = c.ClusterRef
	}
	return out
}

// namespacesOf lists the namespaces of cs once each: clusterctl moves a
// namespace at a time.
func namespacesOf(cs []ClusterRef) []string {
	var out []string
	for _, c := range cs {
		if len(out) == 0 || out[len(out)-1] != c.Namespace {
			out = append(out, c.Namespace)
		}
	}
	return out
}

func collect(ctx context.Context, o Options, src *kube.Client, m *mover, clusters []sourceCluster) (*Archive, error) {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	a := &Archive{
		Manifest: Manifest{Format: Format, ID: hex.EncodeToString(id), Lab: o.Lab, Created: time.Now().UTC().Truncate(time.Second),
			Labctl: versions.Version, Source: src.Host(), Clusters: refsOf(clusters)},
		Files: map[string][]byte{},
	}
	tmp, err := os.MkdirTemp("", "labctl-backup-*")
	if err != nil {
		return nil, err
	}
	// clusterctl writes the objects in the clear (0600 files in a 0700
	// folder); they live only until the archive is made.
	defer os.RemoveAll(tmp)

	status := o.IO.NewStatus()
	for _, ns := range namespacesOf(a.Manifest.Clusters) {
		status.Start("save the Cluster API objects of namespace " + ns)
		dir := filepath.Join(tmp, ns)
		if err := os.Mkdir(dir, 0o700); err != nil {
			status.Fail(err.Error())
			return nil, err
		}
		if err := saveNamespace(ctx, src, m, ns, dir, clustersIn(clusters, ns), status.Update); err != nil {
			status.Fail("failed")
			return nil, err
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			status.Fail(err.Error())
			return nil, err
		}
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				status.Fail(err.Error())
				return nil, err
			}
			a.Files[clusterctlTo+"/"+ns+"/"+e.Name()] = data
		}
		if err := sawClusters(a, ns, clustersIn(clusters, ns)); err != nil {
			status.Fail("clusterctl saved no Cluster")
			return nil, err
		}
		status.OK(fmt.Sprintf("%d object(s); the Clusters run again", len(entries)))
	}
	for _, p := range o.Parts {
		status.Start("save " + p.Name())
		files, err := p.Backup(ctx, src, a.Manifest.Clusters)
		if err != nil {
			status.Fail(err.Error())
			return nil, fmt.Errorf("backing up %s: %w", p.Name(), err)
		}
		for n, data := range files {
			a.Files[partsTo+"/"+p.Name()+"/"+n] = data
		}
		a.Manifest.Parts = append(a.Manifest.Parts, p.Name())
		status.OK(fmt.Sprintf("%d file(s)", len(files)))
	}
	return a, nil
}

// sawClusters checks that clusterctl saved each Cluster of namespace ns.
// clusterctl finds the kinds to save by the label the operator puts on
// every provider CRD it installs; on CRDs installed another way it finds
// no kind, saves nothing and reports no error, and the backup would
// restore no cluster. (sigs.k8s.io/cluster-api v1.14.2
// cmd/clusterctl/client/cluster/objectgraph.go getCRDList.)
func sawClusters(a *Archive, ns string, clusters []ClusterRef) error {
	var missing []string
	for _, c := range clusters {
		if _, ok := a.Files[clusterctlTo+"/"+ns+"/"+clusterapi.ClusterGVK.Kind+"_"+c.Namespace+"_"+c.Name+".yaml"]; !ok {
			missing = append(missing, c.String())
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("clusterctl saved no Cluster %s from namespace %s: its move finds the kinds to save by the label %s on their CRDs, which cluster-api-operator puts on every provider it installs, and the CRDs here lack it (were the providers installed some other way than 'labctl mgmt install'?). The backup would restore nothing of those clusters; nothing was written. Check with 'kubectl get crd -l %s'",
		strings.Join(missing, ", "), ns, clusterctlv1.ClusterctlLabel, clusterctlv1.ClusterctlLabel)
}

// saveNamespace has clusterctl save namespace ns into dir and then makes
// sure its Clusters run again: clusterctl unpauses them only when it gets
// to its end.
func saveNamespace(ctx context.Context, src *kube.Client, m *mover, ns, dir string, clusters []ClusterRef, progress func(string)) error {
	err := m.toDirectory(ctx, src, ns, dir, progress)
	unpaused, uerr := unpause(context.WithoutCancel(ctx), src, clusters)
	if err != nil {
		return errors.Join(fmt.Errorf("backing up namespace %s with clusterctl: %w", ns, err), unpauseReport(unpaused, uerr))
	}
	return uerr
}

func clustersIn(cs []sourceCluster, ns string) []ClusterRef {
	var out []ClusterRef
	for _, c := range cs {
		if c.Namespace == ns {
			out = append(out, c.ClusterRef)
		}
	}
	return out
}

// unpause sets spec.paused back to false on those of cs that are paused
// now. Backup calls it only for Clusters that were not paused before, so
// any pause it finds is clusterctl's.
func unpause(ctx context.Context, c *kube.Client, cs []ClusterRef) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cl, err := c.Ctrl()
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	for _, ref := range cs {
		obj, found, err := c.Get(ctx, kube.Ref{GVK: clusterapi.ClusterGVK, Namespace: ref.Namespace, Name: ref.Name})
		if err != nil || !found {
			errs = append(errs, fmt.Errorf("reading Cluster %s to unpause it: %v", ref, err))
			continue
		}
		if p, _, _ := unstructured.NestedBool(obj.Object, "spec", "paused"); !p {
			continue
		}
		// The merge patch clusterctl itself pauses with (setClusterPause).
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":false}}`))
		if err := cl.Patch(ctx, obj, patch); err != nil {
			errs = append(errs, fmt.Errorf("unpausing Cluster %s: %w", ref, err))
			continue
		}
		done = append(done, ref.String())
	}
	return done, errors.Join(errs...)
}

func unpauseReport(unpaused []string, err error) error {
	if err != nil {
		return fmt.Errorf("%w; the Cluster stays paused (its controllers do nothing) until 'kubectl patch cluster NAME --type merge -p {\"spec\":{\"paused\":false}}'", err)
	}
	if len(unpaused) > 0 {
		return fmt.Errorf("Cluster %s unpaused again: the source runs as before", strings.Join(unpaused, ", "))
	}
	return nil
}

// planBackup is the dry run: what clusterctl would take of each namespace,
// and what each part would hold, by kind and name.
func planBackup(ctx context.Context, o Options, src *kube.Client, m *mover, clusters []sourceCluster) error {
	w := o.IO.Out
	refs := refsOf(clusters)
	inv, err := src.CRD(ctx, inventoryCRD)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "backup of %s (dry run)\n", src.Host())
	for _, ns := range namespacesOf(refs) {
		objs, err := m.plan(ctx, src, ns)
		if err != nil {
			return fmt.Errorf("listing the Cluster API objects of namespace %s with clusterctl: %w", ns, err)
		}
		fmt.Fprintf(w, "clusterctl move of namespace %s: %d object(s)\n", ns, len(objs))
		sort.Strings(objs)
		for _, l := range objs {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	for _, p := range o.Parts {
		files, err := p.Backup(ctx, src, refs)
		if err != nil {
			return fmt.Errorf("listing %s: %w", p.Name(), err)
		}
		fmt.Fprintf(w, "%s: %d\n", p.Name(), len(files))
		for _, l := range describeFiles(files) {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	if !inv.Found {
		fmt.Fprintf(o.IO.Err, "dry run: nothing was paused or written; clusterctl added its inventory CRD %s, as it does before any move\n", inventoryCRD)
		return nil
	}
	fmt.Fprintln(o.IO.Err, "dry run: nothing was paused or written")
	return nil
}

// inventoryCRD is clusterctl's provider inventory, which clusterctl
// installs before any move when it is missing (the operator keeps its own
// Provider CRs, so it stays empty).
const inventoryCRD = "providers.clusterctl.cluster.x-k8s.io"
