package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/ui"
)

// RestoredFromAnnotation is on each Cluster a restore made: the ID of the
// backup it came from. A re-run of the same restore sees it and resumes; a
// Cluster without it is one the target already managed, and a restore
// refuses it.
const RestoredFromAnnotation = "labctl.dev/restored-from"

// DefaultAdoptTimeout bounds the wait for the restored Machines to find
// their Nodes again.
const DefaultAdoptTimeout = 15 * time.Minute

// RestoreOptions are the inputs of 'labctl mgmt restore'.
type RestoreOptions struct {
	IO *ui.IO
	// Mgmt reaches the new management cluster.
	Mgmt func(ctx context.Context) (*kube.Client, error)
	File string
	// DryRun opens the file, checks the target and lists what would be
	// restored; it changes nothing.
	DryRun bool
	// Passphrase returns the passphrase; nil asks as Passphrase does.
	Passphrase func() (string, error)
	// Parts restore the parts of the backup by name; nil means Parts().
	Parts []Part
	// AdoptTimeout bounds the wait for every Machine to have its Node
	// again; 0 is DefaultAdoptTimeout.
	AdoptTimeout time.Duration
}

// Restore puts a backup onto a new management cluster: the parts needed
// before the Clusters (namespaces, credentials), then the Cluster API
// objects through clusterctl's move from a folder, which recreates them
// with their spec (each Machine's providerID, each ProxmoxMachine's VM id)
// so the providers find the VMs that exist instead of making new ones,
// then, once every Machine has its Node again, the autoscalers.
func Restore(ctx context.Context, o RestoreOptions) error {
	if o.Parts == nil {
		o.Parts = Parts()
	}
	if o.AdoptTimeout <= 0 {
		o.AdoptTimeout = DefaultAdoptTimeout
	}
	if _, err := os.Stat(o.File); err != nil {
		return fmt.Errorf("reading the backup: %w", err)
	}
	pass := o.Passphrase
	if pass == nil {
		pass = func() (string, error) { return Passphrase(o.IO, o.File, false) }
	}
	passphrase, err := pass()
	if err != nil {
		return err
	}
	a, err := readArchive(o.File, passphrase)
	if err != nil {
		return err
	}
	parts, err := partsOf(a, o.Parts)
	if err != nil {
		return err
	}
	dst, err := o.Mgmt(ctx)
	if err != nil {
		return err
	}
	resume, err := checkTarget(ctx, dst, a)
	if err != nil {
		return err
	}
	man := a.Manifest
	fmt.Fprintf(o.IO.Err, "backup %s: lab %s, taken %s from %s by labctl %s; %d cluster(s)\n",
		man.ID, man.Lab, man.Created.Format(time.RFC3339), man.Source, man.Labctl, len(man.Clusters))
	if len(resume) > 0 {
		fmt.Fprintf(o.IO.Err, "Cluster %s already restored from this backup: resuming\n", strings.Join(resume, ", "))
	}
	if len(man.SkippedTenants) > 0 {
		names := make([]string, len(man.SkippedTenants))
		for i, c := range man.SkippedTenants {
			names[i] = c.String()
		}
		fmt.Fprintf(o.IO.Err, "not in this backup: Kamaji tenant(s) %s (taken with --skip-tenants): this restore does not bring them back\n", strings.Join(names, ", "))
	}
	if o.DryRun {
		return planRestore(ctx, o, dst, a, parts)
	}

	m, err := newMover(ctx)
	if err != nil {
		return err
	}
	status := o.IO.NewStatus()
	restoreStage := func(stage Stage) error {
		for _, p := range parts {
			if p.Stage() != stage {
				continue
			}
			status.Start("restore " + p.Name())
			lines, err := p.Restore(ctx, dst, a.Under(partsTo+"/"+p.Name()), false)
			if err != nil {
				status.Fail(err.Error())
				return fmt.Errorf("restoring %s: %w", p.Name(), err)
			}
			status.OK(summarize(lines))
		}
		return nil
	}
	if err := restoreStage(BeforeClusters); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "labctl-restore-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for _, ns := range namespacesOf(man.Clusters) {
		status.Start("restore the Cluster API objects of namespace " + ns)
		dir := filepath.Join(tmp, ns)
		n, err := unpack(a, ns, dir)
		if err != nil {
			status.Fail(err.Error())
			return err
		}
		if err := m.fromDirectory(ctx, dst, dir, status.Update); err != nil {
			status.Fail("clusterctl failed")
			return fmt.Errorf("restoring namespace %s with clusterctl: %w; what was made stays (its Clusters paused until the end); run the same restore again to resume", ns, err)
		}
		status.OK(fmt.Sprintf("%d object(s); the Clusters are unpaused", n))
	}
	status.Start("wait for every Machine to find its VM and Node again")
	wctx := kube.WithProgress(ctx, status.Update)
	if err := waitAdopted(wctx, dst, a, o.AdoptTimeout); err != nil {
		status.Fail("not yet")
		return fmt.Errorf("%w; the autoscalers were not started: once 'labctl cluster describe NAME' shows the Machines Running, run the same restore again to finish", err)
	}
	status.OK("every Machine has its Node")
	if err := restoreStage(AfterClusters); err != nil {
		return err
	}
	names := make([]string, len(man.Clusters))
	for i, c := range man.Clusters {
		names[i] = c.String()
	}
	fmt.Fprintf(o.IO.Err, "restored onto %s: %s\n", dst.Host(), strings.Join(names, ", "))
	fmt.Fprintln(o.IO.Err, "The old management cluster must stay down: two management clusters would both act on the same VMs.")
	return nil
}

// partsOf matches the backup's parts with the ones this labctl knows; a
// part it does not know is refused rather than silently left out.
func partsOf(a *Archive, known []Part) ([]Part, error) {
	byName := map[string]Part{}
	for _, p := range known {
		byName[p.Name()] = p
	}
	var out []Part
	var unknown []string
	for _, n := range a.Manifest.Parts {
		p, ok := byName[n]
		if !ok {
			unknown = append(unknown, n)
			continue
		}
		out = append(out, p)
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("the backup holds part(s) %s, which this labctl does not know how to restore: use the labctl that wrote it (%s) or a newer one", strings.Join(unknown, ", "), a.Manifest.Labctl)
	}
	return out, nil
}

// checkTarget refuses a management cluster that already manages one of
// the backup's clusters: two management clusters would both act on its
// VMs. Clusters it finds restored from this same backup are a re-run,
// returned to resume.
func checkTarget(ctx context.Context, dst *kube.Client, a *Archive) (resume []string, err error) {
	served, err := dst.Serves(clusterapi.ClusterGVK)
	if err != nil {
		return nil, fmt.Errorf("asking %s for Cluster API: %w", dst.Host(), err)
	}
	if !served {
		return nil, fmt.Errorf("%s has no Cluster API (%s is not served): restore goes onto a management cluster that 'labctl mgmt up' (or 'mgmt install') made, with the same providers as the old one", dst.Host(), clusterapi.ClusterGVK.GroupVersion())
	}
	var taken []string
	for _, c := range a.Manifest.Clusters {
		live, found, err := dst.Get(ctx, kube.Ref{GVK: clusterapi.ClusterGVK, Namespace: c.Namespace, Name: c.Name})
		if err != nil {
			return nil, fmt.Errorf("looking for Cluster %s on %s: %w", c, dst.Host(), err)
		}
		if !found {
			continue
		}
		if live.GetAnnotations()[RestoredFromAnnotation] == a.Manifest.ID {
			resume = append(resume, c.String())
			continue
		}
		taken = append(taken, c.String())
	}
	if len(taken) > 0 {
		return nil, fmt.Errorf("refusing to restore onto %s: it already manages Cluster %s; restoring would give those clusters' VMs two owners. Restore onto a new management cluster ('labctl mgmt up' on a fresh VM), or, if this one should keep them, there is nothing to restore", dst.Host(), strings.Join(taken, ", "))
	}
	return resume, nil
}

// unpack writes namespace ns's clusterctl files into dir, marking each
// Cluster with the backup's ID (RestoredFromAnnotation).
func unpack(a *Archive, ns, dir string) (int, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return 0, err
	}
	files := a.Under(clusterctlTo + "/" + ns)
	for name, data := range files {
		if strings.Contains(name, "/") {
			return 0, fmt.Errorf("the backup's clusterctl file %s/%s is in a subfolder: not one clusterctl wrote", ns, name)
		}
		var u unstructured.Unstructured
		if err := json.Unmarshal(data, &u.Object); err != nil {
			return 0, fmt.Errorf("the backup's clusterctl file %s/%s: %w", ns, name, err)
		}
		if u.GroupVersionKind().GroupKind() == clusterapi.ClusterGVK.GroupKind() {
			ann := u.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			ann[RestoredFromAnnotation] = a.Manifest.ID
			u.SetAnnotations(ann)
			var err error
			if data, err = json.Marshal(u.Object); err != nil {
				return 0, err
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return 0, err
		}
	}
	return len(files), nil
}

// machinesOf lists the backup's Machines by namespace.
func machinesOf(a *Archive) (map[string][]string, error) {
	out := map[string][]string{}
	for p, data := range a.Under(clusterctlTo) {
		if !strings.HasPrefix(filepath.Base(p), clusterapi.MachineGVK.Kind+"_") {
			continue
		}
		var u unstructured.Unstructured
		if err := json.Unmarshal(data, &u.Object); err != nil {
			return nil, fmt.Errorf("the backup's clusterctl file %s: %w", p, err)
		}
		if u.GroupVersionKind().GroupKind() != clusterapi.MachineGVK.GroupKind() {
			continue
		}
		out[u.GetNamespace()] = append(out[u.GetNamespace()], u.GetName())
	}
	return out, nil
}

// waitAdopted waits until each of the backup's Machines runs again with
// its Node (phase Running, status.nodeRef): its provider found the VM,
// Cluster API the Node.
func waitAdopted(ctx context.Context, dst *kube.Client, a *Archive, timeout time.Duration) error {
	byNS, err := machinesOf(a)
	if err != nil {
		return err
	}
	nss := make([]string, 0, len(byNS))
	for ns := range byNS {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	deadline := time.Now().Add(timeout)
	for _, ns := range nss {
		want := byNS[ns]
		sort.Strings(want)
		err := dst.Until(ctx, kube.Watch{GVK: clusterapi.MachineGVK, Namespace: ns}, fmt.Sprintf("the %d Machine(s) of namespace %s", len(want), ns), "adopted (Running, with status.nodeRef)",
			time.Until(deadline), func(objs map[string]*unstructured.Unstructured) (bool, string) {
				var waiting []string
				for _, n := range want {
					m, ok := objs[n]
					if !ok {
						waiting = append(waiting, n+" (missing)")
						continue
					}
					// Running: Cluster API found the Node and the provider
					// reports the VM provisioned again; a Node alone
					// comes back from the workload cluster whatever the
					// provider does.
					node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
					phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
					if node == "" || phase != "Running" {
						waiting = append(waiting, fmt.Sprintf("%s (%s)", n, orDash(phase)))
					}
				}
				if len(waiting) == 0 {
					return true, ""
				}
				return false, "waiting for " + strings.Join(waiting, ", ")
			})
		if err != nil {
			return err
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "no phase yet"
	}
	return s
}

// planRestore is the dry run: the target accepts the backup (checked
// already), and this is what would be made.
func planRestore(ctx context.Context, o RestoreOptions, dst *kube.Client, a *Archive, parts []Part) error {
	w := o.IO.Out
	fmt.Fprintf(w, "restore onto %s (dry run)\n", dst.Host())
	show := func(stage Stage) error {
		for _, p := range parts {
			if p.Stage() != stage {
				continue
			}
			lines, err := p.Restore(ctx, dst, a.Under(partsTo+"/"+p.Name()), true)
			if err != nil {
				return fmt.Errorf("planning %s: %w", p.Name(), err)
			}
			fmt.Fprintf(w, "%s:\n", p.Name())
			for _, l := range lines {
				fmt.Fprintf(w, "  %s\n", l)
			}
		}
		return nil
	}
	if err := show(BeforeClusters); err != nil {
		return err
	}
	for _, ns := range namespacesOf(a.Manifest.Clusters) {
		files := a.Under(clusterctlTo + "/" + ns)
		fmt.Fprintf(w, "clusterctl move from the backup into namespace %s: %d object(s), then the Clusters unpaused\n", ns, len(files))
		for _, l := range describeFiles(files) {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	fmt.Fprintln(w, "then: wait for every Machine to have its Node again")
	if err := show(AfterClusters); err != nil {
		return err
	}
	fmt.Fprintln(o.IO.Err, "dry run: nothing was restored")
	return nil
}

// summarize is one status line for a part's lines.
func summarize(lines []string) string {
	if len(lines) == 0 {
		return "nothing to do"
	}
	made, kept := 0, 0
	var other []string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "created "):
			made++
		case strings.Contains(l, ": kept") || strings.Contains(l, "the target's is kept"):
			kept++
		default:
			// What is neither an object made nor one kept (a tenant's
			// keys put back) is said as it is.
			other = append(other, l)
		}
	}
	s := fmt.Sprintf("%d created, %d kept as the target has them", made, kept)
	if len(other) > 0 {
		s += "; " + strings.Join(other, "; ")
	}
	return s
}
