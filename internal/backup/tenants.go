package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/datastore"
	"github.com/labctl/labctl/internal/kube"
)

// tenantControlPlanes is what a Kamaji tenant's control plane is, beside
// the Cluster API objects clusterctl moves (docs/tenants.md, "Backup"):
//
//   - the Secrets Kamaji keeps beside its TenantControlPlane (owned by
//     it, which clusterctl does not move: Kamaji's kinds are no provider's):
//     the tenant's CAs, service-account key and kubeconfigs. Restored
//     before the TenantControlPlane is made again, Kamaji finds them valid
//     and keeps them (e51909f internal/resources/ca_certificate.go: an
//     existing Secret whose pair is valid is adopted), so the workers still
//     trust their control plane;
//   - the tenant's keys in its DataStore, under /<schema>/, read at one
//     revision as the root client Kamaji manages the datastore with, and
//     put back into the new management cluster's DataStore of the same
//     name under the same prefix. Kamaji then makes the tenant's etcd user
//     and role there as for any new tenant, and its API server starts on
//     the restored state.
type tenantControlPlanes struct{}

func (tenantControlPlanes) Name() string { return "tenants" }
func (tenantControlPlanes) Stage() Stage { return BeforeClusters }

// tenantData is a tenant's datastore file.
type tenantData struct {
	Namespace          string `json:"namespace"`
	TenantControlPlane string `json:"tenantControlPlane"`
	DataStore          string `json:"dataStore"`
	Schema             string `json:"schema"`
	// Revision is the source etcd's revision the keys were read at.
	Revision int64          `json:"revision"`
	Keys     []datastore.KV `json:"keys"`
}

func dataFile(ns, tcp string) string { return "datastore_" + ns + "_" + tcp + ".json" }

func (tenantControlPlanes) Backup(ctx context.Context, src *kube.Client, clusters []ClusterRef) (map[string][]byte, error) {
	files := map[string][]byte{}
	stores := map[string]*datastore.Store{}
	defer func() {
		for _, s := range stores {
			s.Close()
		}
	}()
	for _, c := range clusters {
		cl, found, err := src.Get(ctx, kube.Ref{GVK: clusterapi.ClusterGVK, Namespace: c.Namespace, Name: c.Name})
		if err != nil || !found {
			return nil, fmt.Errorf("reading Cluster %s: %v", c, err)
		}
		if !clusterapi.IsTenant(cl) {
			continue
		}
		tcp, err := tenantControlPlane(ctx, src, cl)
		if err != nil {
			return nil, err
		}
		schema, _, _ := unstructured.NestedString(tcp.Object, "status", "storage", "setup", "schema")
		ds, _, _ := unstructured.NestedString(tcp.Object, "status", "storage", "dataStoreName")
		if schema == "" || ds == "" {
			return nil, fmt.Errorf("tenant %s: Kamaji has not set up TenantControlPlane %s/%s's datastore yet (status.storage): wait for 'labctl cluster describe %s' to show it, or back up with --skip-tenants", c, c.Namespace, tcp.GetName(), c.Name)
		}
		secrets, err := src.List(ctx, secretGVK, c.Namespace, "")
		if err != nil {
			return nil, fmt.Errorf("listing the Secrets of tenant %s: %w", c, err)
		}
		for i := range secrets {
			s := &secrets[i]
			if !controlledBy(s, clusterapi.TenantControlPlaneGVK.Kind, tcp.GetName()) {
				continue
			}
			o := portable(s)
			// The owner's uid is the source's; Kamaji sets itself as the
			// owner again when it adopts the Secret.
			o.SetOwnerReferences(nil)
			data, err := kube.MarshalYAML([]*unstructured.Unstructured{o})
			if err != nil {
				return nil, err
			}
			files[objectFile(o)] = data
		}
		store := stores[ds]
		if store == nil {
			if store, err = datastore.Open(ctx, src, ds); err != nil {
				return nil, fmt.Errorf("tenant %s: %w", c, err)
			}
			stores[ds] = store
		}
		kvs, rev, err := store.Keys(ctx, datastore.Prefix(schema))
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", c, err)
		}
		if len(kvs) == 0 {
			return nil, fmt.Errorf("tenant %s: DataStore %s holds no key under %s, where Kamaji keeps the tenant: its control plane has no state to back up; check 'labctl cluster describe %s'", c, ds, datastore.Prefix(schema), c.Name)
		}
		data, err := json.Marshal(tenantData{Namespace: c.Namespace, TenantControlPlane: tcp.GetName(), DataStore: ds, Schema: schema, Revision: rev, Keys: kvs})
		if err != nil {
			return nil, err
		}
		files[dataFile(c.Namespace, tcp.GetName())] = data
	}
	return files, nil
}

// tenantControlPlane is the TenantControlPlane behind a tenant Cluster:
// the Kamaji provider names it after the KamajiControlPlane.
func tenantControlPlane(ctx context.Context, kc *kube.Client, cl *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	name, _, _ := unstructured.NestedString(cl.Object, "spec", "controlPlaneRef", "name")
	if name == "" {
		return nil, fmt.Errorf("tenant %s/%s has no control plane yet (spec.controlPlaneRef)", cl.GetNamespace(), cl.GetName())
	}
	tcp, found, err := kc.Get(ctx, kube.Ref{GVK: clusterapi.TenantControlPlaneGVK, Namespace: cl.GetNamespace(), Name: name})
	if err != nil {
		return nil, fmt.Errorf("reading TenantControlPlane %s/%s: %w", cl.GetNamespace(), name, err)
	}
	if !found {
		return nil, fmt.Errorf("tenant %s/%s: Kamaji has no TenantControlPlane %s (yet): its control plane cannot be backed up; check 'labctl cluster describe %s', or back up with --skip-tenants", cl.GetNamespace(), cl.GetName(), name, cl.GetName())
	}
	return tcp, nil
}

func controlledBy(o *unstructured.Unstructured, kind, name string) bool {
	for _, r := range o.GetOwnerReferences() {
		if r.Controller != nil && *r.Controller && r.Kind == kind && r.Name == name {
			return true
		}
	}
	return false
}

func (p tenantControlPlanes) Restore(ctx context.Context, dst *kube.Client, files map[string][]byte, dryRun bool) ([]string, error) {
	objects := map[string][]byte{}
	var data []string
	for n, f := range files {
		if strings.HasSuffix(n, ".json") {
			data = append(data, n)
		} else {
			objects[n] = f
		}
	}
	lines, err := restoreFiles(ctx, dst, p.Name(), objects, dryRun)
	if err != nil {
		return nil, err
	}
	sort.Strings(data)
	for _, n := range data {
		var t tenantData
		if err := json.Unmarshal(files[n], &t); err != nil {
			return nil, fmt.Errorf("%s/%s/%s: %w", partsTo, p.Name(), n, err)
		}
		line, err := restoreTenantData(ctx, dst, t, dryRun)
		if err != nil {
			return nil, err
		}
		lines = append(lines, line)
	}
	return lines, nil
}

// restoreTenantData puts a tenant's keys back, once: a tenant whose
// TenantControlPlane runs on the target already (an earlier run of this
// restore) keeps its datastore as it is now, and a prefix that holds
// other data is refused, never overwritten.
func restoreTenantData(ctx context.Context, dst *kube.Client, t tenantData, dryRun bool) (string, error) {
	prefix := datastore.Prefix(t.Schema)
	what := fmt.Sprintf("%d key(s) of tenant %s/%s under %s of DataStore %s", len(t.Keys), t.Namespace, t.TenantControlPlane, prefix, t.DataStore)
	_, running, err := dst.Get(ctx, kube.Ref{GVK: clusterapi.TenantControlPlaneGVK, Namespace: t.Namespace, Name: t.TenantControlPlane})
	if err != nil {
		return "", fmt.Errorf("reading TenantControlPlane %s/%s on the target: %w", t.Namespace, t.TenantControlPlane, err)
	}
	if running {
		return "TenantControlPlane " + t.Namespace + "/" + t.TenantControlPlane + " runs on the target: its datastore is kept as it is", nil
	}
	store, err := datastore.Open(ctx, dst, t.DataStore)
	if err != nil {
		return "", fmt.Errorf("restoring tenant %s/%s: %w", t.Namespace, t.TenantControlPlane, err)
	}
	defer store.Close()
	have, _, err := store.Keys(ctx, prefix)
	if err != nil {
		return "", err
	}
	if len(have) > 0 {
		if sameKeys(have, t.Keys) {
			return "kept " + what + ": already there", nil
		}
		return "", fmt.Errorf("DataStore %s on the target already holds %d key(s) under %s, other than the backup's: another tenant %s/%s has lived on this management cluster. labctl never overwrites a tenant's state: delete that tenant ('labctl cluster delete'), or restore onto a new management cluster", t.DataStore, len(have), prefix, t.Namespace, t.TenantControlPlane)
	}
	if dryRun {
		return "would put " + what, nil
	}
	if err := store.Put(ctx, t.Keys); err != nil {
		return "", fmt.Errorf("restoring tenant %s/%s: %w", t.Namespace, t.TenantControlPlane, err)
	}
	return "put " + what, nil
}

// sameKeys says whether have holds every key of want with its value.
func sameKeys(have, want []datastore.KV) bool {
	m := make(map[string]string, len(have))
	for _, kv := range have {
		m[string(kv.Key)] = string(kv.Value)
	}
	for _, kv := range want {
		if v, ok := m[string(kv.Key)]; !ok || v != string(kv.Value) {
			return false
		}
	}
	return true
}
