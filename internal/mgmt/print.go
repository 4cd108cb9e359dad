package mgmt

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/helm"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/redact"
)

// printObjects writes every object the install would apply to stdout, in
// order: for charts the HelmChart (helm-controller) or the chart's
// rendered manifests (Helm SDK), then labctl's own objects. Secret values
// are replaced by where they come from.
func (in *installer) printObjects(ctx context.Context) error {
	var objs []*unstructured.Unstructured
	var skipped []string
	defer func() {
		for _, m := range skipped {
			fmt.Fprintln(in.o.IO.Err, in.o.IO.Styles(in.o.IO.Err).Warn(m))
		}
	}()
	for i := range in.comps {
		c := &in.comps[i]
		if c.Chart != nil {
			if in.mode == HelmController {
				obj, err := c.Chart.HelmChart()
				if err != nil {
					return err
				}
				objs = append(objs, obj)
				continue
			}
			raw, err := in.hc.Render(ctx, c.Chart.Release, in.kver)
			var offline *helm.UnreachableError
			if errors.As(err, &offline) && ctx.Err() == nil {
				skipped = append(skipped, fmt.Sprintf("not rendered: chart %s, whose repository did not answer (%v); "+
					"--offline-dir DIR with the chart's archive in it renders it without the network (docs/mgmt.md, \"Air-gapped\")", c.Chart.Release.Chart, err))
				continue
			}
			if err != nil {
				return err
			}
			rendered, err := kube.ParseObjects("chart "+c.Chart.Release.Chart.String(), raw)
			if err != nil {
				return err
			}
			for _, o := range rendered {
				if o.GetNamespace() == "" && namespaced(o) {
					o.SetNamespace(c.Chart.Release.Namespace)
				}
			}
			objs = append(objs, rendered...)
			continue
		}
		for _, o := range c.Objects {
			objs = append(objs, redactSecrets(o, c.Secrets))
		}
	}
	for i, o := range objs {
		objs[i] = redactURLs(o)
	}
	if in.o.Output == "json" {
		list := map[string]any{"apiVersion": "v1", "kind": "List", "items": objectsOf(objs)}
		data, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding the objects: %w", err)
		}
		_, err = in.o.IO.Out.Write(append(data, '\n'))
		return err
	}
	data, err := kube.MarshalYAML(objs)
	if err != nil {
		return err
	}
	// What is missing says so where the objects go, too.
	var head []byte
	for _, m := range skipped {
		head = append(head, "# "+m+"\n"...)
	}
	_, err = in.o.IO.Out.Write(append(head, data...))
	return err
}

func objectsOf(objs []*unstructured.Unstructured) []any {
	out := make([]any, len(objs))
	for i, o := range objs {
		out[i] = o.Object
	}
	return out
}

// namespaced guesses whether a chart object is namespaced: charts leave
// the namespace out and Helm fills it in.
func namespaced(o *unstructured.Unstructured) bool {
	switch o.GetKind() {
	case "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
		"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "APIService", "PriorityClass", "StorageClass":
		return false
	}
	return true
}

// redactSecrets returns o for printing: a Secret's data becomes readable
// stringData in which only values known to be harmless (the Proxmox URL
// and token id) show; a secret value shows where it comes from instead.
func redactSecrets(o *unstructured.Unstructured, secrets []components.SecretField) *unstructured.Unstructured {
	if o.GetKind() != "Secret" {
		return o
	}
	out := o.DeepCopy()
	data, _, _ := unstructured.NestedStringMap(out.Object, "data")
	plain := map[string]any{}
	for k, v := range data {
		plain[k] = "(not shown)"
		if b, err := base64.StdEncoding.DecodeString(v); err == nil && harmless[k] {
			plain[k] = redact.URL(string(b))
		}
		for _, s := range secrets {
			if s.Ref == kube.RefOf(o) && s.Key == k {
				plain[k] = "(secret, from " + s.From + "; not shown)"
			}
		}
	}
	unstructured.RemoveNestedField(out.Object, "data")
	out.Object["stringData"] = plain
	return out
}

// harmless are Secret keys whose values are not secret.
var harmless = map[string]bool{"PROXMOX_URL": true, "PROXMOX_TOKEN": true}

// redactURLs returns o with redact.URL applied to every string in it: a
// provider's fetchConfig.url or a chart value may hold a URL with
// credentials, and printing is where they would leak.
func redactURLs(o *unstructured.Unstructured) *unstructured.Unstructured {
	out := o.DeepCopy()
	out.Object = redactValue(out.Object).(map[string]any)
	return out
}

func redactValue(v any) any {
	switch t := v.(type) {
	case string:
		return redact.URL(t)
	case map[string]any:
		for k, x := range t {
			t[k] = redactValue(x)
		}
	case []any:
		for i, x := range t {
			t[i] = redactValue(x)
		}
	}
	return v
}
