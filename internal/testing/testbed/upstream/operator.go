package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// AsOperator returns the provider manager Deployment d as
// cluster-api-operator v0.28.0 makes it from a Provider CR's spec, for
// the two fields labctl sets there (sigs.k8s.io/cluster-api-operator
// v0.28.0):
//   - spec.deployment.containers[].args and env on the container of that
//     name (internal/controller/component_customizer.go
//     customizeContainer: setArgs replaces --name=... or appends it;
//     an env var replaces one of the same name);
//   - then spec.patches (phase_fetch.go runs them after the customizer):
//     each patch on the objects its target matches, as an RFC 6902 patch
//     when it parses as one, else as a JSON merge patch
//     (internal/patch/patch.go inferAndApplyPatchType, with
//     github.com/evanphx/json-patch/v5 as the operator uses it).
//
// Fields it does not copy make it fail, so a test never reads a
// Deployment the operator would make differently.
func AsOperator(d *unstructured.Unstructured, spec map[string]any) (*appsv1.Deployment, error) {
	for k := range spec {
		switch k {
		case "version", "configSecret", "fetchConfig", "deployment", "patches":
		default:
			return nil, fmt.Errorf("AsOperator does not copy the operator's handling of spec.%s", k)
		}
	}
	var dep appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object, &dep); err != nil {
		return nil, fmt.Errorf("decoding Deployment %s: %w", d.GetName(), err)
	}
	containers, _, _ := unstructured.NestedSlice(spec, "deployment", "containers")
	for _, c := range containers {
		cs, _ := c.(map[string]any)
		name, _ := cs["name"].(string)
		idx := -1
		for i := range dep.Spec.Template.Spec.Containers {
			if dep.Spec.Template.Spec.Containers[i].Name == name {
				idx = i
			}
		}
		if idx < 0 {
			return nil, fmt.Errorf("cannot find container %q in deployment %q", name, dep.Name)
		}
		ct := &dep.Spec.Template.Spec.Containers[idx]
		args, _, _ := unstructured.NestedStringMap(cs, "args")
		for n, v := range args {
			set := false
			for i, a := range ct.Args {
				if strings.HasPrefix(a, n+"=") {
					ct.Args[i], set = n+"="+v, true
					break
				}
			}
			if !set {
				ct.Args = append(ct.Args, n+"="+v)
			}
		}
		if _, ok := cs["env"]; ok {
			return nil, fmt.Errorf("AsOperator does not copy containers[].env yet")
		}
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&dep)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	if err := PatchAsOperator(u, spec); err != nil {
		return nil, err
	}
	var out appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out); err != nil {
		return nil, fmt.Errorf("decoding the patched Deployment %s: %w", d.GetName(), err)
	}
	return &out, nil
}

// PatchAsOperator applies a Provider CR spec's patches to u in place, as
// cluster-api-operator v0.28.0 applies them to each object of a release
// (AsOperator says how).
func PatchAsOperator(u *unstructured.Unstructured, spec map[string]any) error {
	patches, _, _ := unstructured.NestedSlice(spec, "patches")
	for i, p := range patches {
		pm, _ := p.(map[string]any)
		target, _, _ := unstructured.NestedStringMap(pm, "target")
		if target["labelSelector"] != "" {
			return fmt.Errorf("patch %d: AsOperator does not copy target.labelSelector", i)
		}
		if !matches(u, target) {
			continue
		}
		body, _ := pm["patch"].(string)
		raw, err := yaml.YAMLToJSON([]byte(body))
		if err != nil {
			return fmt.Errorf("patch %d: %w", i, err)
		}
		doc, err := u.MarshalJSON()
		if err != nil {
			return err
		}
		var ops []json.RawMessage
		if json.Unmarshal(raw, &ops) == nil {
			jp, err := jsonpatch.DecodePatch(raw)
			if err != nil {
				return fmt.Errorf("patch %d: %w", i, err)
			}
			doc, err = jp.Apply(doc)
			if err != nil {
				return fmt.Errorf("patch %d: failed to apply RFC6902 patch: %w", i, err)
			}
		} else if doc, err = jsonpatch.MergePatch(doc, raw); err != nil {
			return fmt.Errorf("patch %d: failed to apply merge patch: %w", i, err)
		}
		if err := u.UnmarshalJSON(doc); err != nil {
			return err
		}
	}
	return nil
}

// matches is the operator's matchSelector (internal/patch/matchinfo.go)
// for the fields a target may set, label selectors aside.
func matches(u *unstructured.Unstructured, t map[string]string) bool {
	gvk := u.GroupVersionKind()
	for k, have := range map[string]string{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind, "name": u.GetName(), "namespace": u.GetNamespace()} {
		if w := t[k]; w != "" && w != have {
			return false
		}
	}
	return true
}

// DeploymentAsOperator is the named provider's release Deployment (its
// one Deployment) as the operator makes it from a Provider CR's spec
// (AsOperator).
func DeploymentAsOperator(ctx context.Context, root, name string, spec map[string]any) (*appsv1.Deployment, error) {
	c, err := Get(ctx, root, name)
	if err != nil {
		return nil, err
	}
	deps := c.Kind("Deployment")
	if len(deps) != 1 {
		return nil, fmt.Errorf("%s's release has %d Deployments, want 1", name, len(deps))
	}
	d, err := AsOperator(deps[0], spec)
	if err != nil {
		return nil, fmt.Errorf("the operator would fail on the Provider CR: %w", err)
	}
	return d, nil
}
