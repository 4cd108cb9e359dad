package cluster

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/kube"
)

var clusterRoleGVK = schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}

// checkPrerequisites makes sure, before anything is written, that the
// management cluster can take every object create would apply: each kind
// is served (Cluster API, its providers and IPAM are installed), and each
// ClusterRole a binding names exists ('labctl mgmt install' makes the
// autoscaler's). A cluster without them would otherwise get its Namespace
// and then fail, leaving half a cluster behind. It only reads.
func checkPrerequisites(ctx context.Context, m *kube.Client, name string, sets ...[]*unstructured.Unstructured) error {
	seen := map[schema.GroupVersionKind]bool{}
	roles := map[string]bool{}
	var kinds, missingRoles, missingClasses []string
	for _, objs := range sets {
		for _, o := range objs {
			gvk := o.GroupVersionKind()
			if !seen[gvk] {
				seen[gvk] = true
				served, err := m.Serves(gvk)
				if err != nil {
					return fmt.Errorf("checking that the management cluster %s serves %s: %w", m.Host(), gvk.Kind, err)
				}
				if !served {
					kinds = append(kinds, fmt.Sprintf("%s (%s)", gvk.Kind, gvk.GroupVersion()))
				}
			}
			// A tenant's Cluster names a labctl ClusterClass, which 'mgmt
			// install' applies.
			if class, _, _ := unstructured.NestedString(o.Object, "spec", "topology", "classRef", "name"); gvk == clusterapi.ClusterGVK && class != "" {
				cns, _, _ := unstructured.NestedString(o.Object, "spec", "topology", "classRef", "namespace")
				if cns == "" {
					cns = o.GetNamespace()
				}
				if served, err := m.Serves(clusterapi.ClusterClassGVK); err != nil {
					return fmt.Errorf("checking that the management cluster %s serves ClusterClass: %w", m.Host(), err)
				} else if served {
					_, found, err := m.Get(ctx, kube.Ref{GVK: clusterapi.ClusterClassGVK, Namespace: cns, Name: class})
					if err != nil {
						return fmt.Errorf("checking the management cluster %s for ClusterClass %s/%s: %w", m.Host(), cns, class, err)
					}
					if !found {
						missingClasses = append(missingClasses, cns+"/"+class)
					}
				}
			}
			if gvk.Kind == "ClusterRoleBinding" || gvk.Kind == "RoleBinding" {
				kind, _, _ := unstructured.NestedString(o.Object, "roleRef", "kind")
				role, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
				if kind == "ClusterRole" && role != "" && !roles[role] {
					roles[role] = true
					_, found, err := m.Get(ctx, kube.Ref{GVK: clusterRoleGVK, Name: role})
					if err != nil {
						return fmt.Errorf("checking the management cluster %s for ClusterRole %s: %w", m.Host(), role, err)
					}
					if !found {
						missingRoles = append(missingRoles, role)
					}
				}
			}
		}
	}
	if len(kinds) == 0 && len(missingRoles) == 0 && len(missingClasses) == 0 {
		return nil
	}
	sort.Strings(kinds)
	var what []string
	if len(kinds) > 0 {
		what = append(what, "it does not serve "+strings.Join(kinds, ", ")+", so Cluster API or a provider is not installed")
	}
	if len(missingRoles) > 0 {
		what = append(what, "ClusterRole "+strings.Join(missingRoles, ", ")+" is missing")
	}
	if len(missingClasses) > 0 {
		what = append(what, "ClusterClass "+strings.Join(missingClasses, ", ")+" is missing")
	}
	return fmt.Errorf("the management cluster %s cannot hold cluster %s yet: %s; run 'labctl mgmt install' (and 'labctl mgmt status' to see each component); nothing was written",
		m.Host(), name, strings.Join(what, "; "))
}
