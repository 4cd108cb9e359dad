package components

import (
	"fmt"
	"path"

	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/config"
)

// Where CAPMOX gets the lab's Proxmox CA.
const (
	// ProxmoxCA is the ConfigMap, in CAPMOX's namespace, holding the
	// lab's tls.caFile (a CA certificate is public: a ConfigMap, never
	// the configSecret, so dry runs may print it).
	ProxmoxCA = "proxmox-ca"
	// ProxmoxCAKey is its key, and the file's name in the mount.
	ProxmoxCAKey = "ca.crt"
	// ProxmoxCAMount is where the manager container sees it.
	ProxmoxCAMount = "/etc/labctl/proxmox-ca"
	// CAPMOXDeployment is the manager's Deployment in CAPMOX's release
	// components (config/manager/manager.yaml "controller-manager" with
	// config/default's namePrefix "capmox-", v0.9.0).
	CAPMOXDeployment = "capmox-controller-manager"
	// caVolume names the volume the patch adds.
	caVolume = "labctl-proxmox-ca"
)

// capmoxTLS is how CAPMOX verifies the Proxmox API. CAPMOX v0.9.0's
// cmd/main.go (initFlagsAndEnv) defaults --proxmox-insecure to
// PROXMOX_INSECURE, itself "true" when unset, and reads extra roots only
// from the file --proxmox-root-cert-file names (internal/tlshelper
// SystemRootsWithFile: the system pool plus that file). So labctl sets
// both explicitly, as the lab says.
type capmoxTLS struct {
	insecure bool
	// caFile is set when the lab trusts the server through a CA file.
	caFile string
	// caPEM is its content; nil when the files were not read (status,
	// emitted manifests: SkipLocalFiles).
	caPEM []byte
}

// capmoxTLSFor turns the hypervisor's tls block into CAPMOX's settings.
// A pinned fingerprint is refused (when the files are read, as by mgmt
// install): CAPMOX v0.9.0 has no way to pin one
// (its client takes only InsecureSkipVerify and RootCAs, cmd/main.go
// setupProxmoxClient), and turning verification off instead would be
// lying about what the lab asked for.
func capmoxTLSFor(px *config.Hypervisor, readFiles bool) (*capmoxTLS, error) {
	field := fmt.Sprintf("hypervisors[%s].proxmox.tls", px.Name)
	t := px.Proxmox.TLS
	switch {
	case t.InsecureSkipVerify:
		// The owner turned verification off in lab.yaml; say so to
		// CAPMOX explicitly rather than rely on its default.
		return &capmoxTLS{insecure: true}, nil
	case t.Fingerprint != "" && !readFiles:
		// Status and the charts of mgmt up apply no Provider: the
		// refusal is mgmt install's, which would.
		return &capmoxTLS{}, nil
	case t.Fingerprint != "":
		return nil, fmt.Errorf("%s.fingerprint: CAPMOX (the management cluster's Proxmox provider) cannot pin a certificate fingerprint, only verify against CA certificates; "+
			"set %s.caFile to the Proxmox cluster's CA instead (copy /etc/pve/pve-root-ca.pem from a node) and drop fingerprint", field, field)
	case t.CAFile == "":
		// The system roots verify (tlshelper returns nil, Go's pool).
		return &capmoxTLS{}, nil
	}
	ct := &capmoxTLS{caFile: t.CAFile}
	if !readFiles {
		return ct, nil
	}
	data, _, err := px.ReadCAFile()
	if err != nil {
		return nil, err
	}
	ct.caPEM = data
	return ct, nil
}

// apply writes the settings into the InfrastructureProvider's spec, in
// cluster-api-operator v0.28.0's API (api/v1alpha2/provider_types.go):
//   - spec.deployment.containers[manager].args: the operator sets each on
//     the container named "manager" (internal/controller/
//     component_customizer.go customizeContainer, setArgs);
//   - spec.patches: an RFC 6902 patch on CAPMOX's Deployment that mounts
//     the CA ConfigMap (internal/patch/patch.go ApplyGenericPatches, run
//     after the customizer in phase_fetch.go). Not manifestPatches: those
//     are RFC 7396 merge patches, which would replace the containers and
//     volumes lists, webhook certificate and all. The paths are those of
//     CAPMOX v0.9.0's release Deployment: one container (manager) with
//     volumeMounts, and a volumes list (config/default/
//     manager_webhook_patch.yaml).
func (t *capmoxTLS) apply(spec map[string]any) {
	args := map[string]any{"--proxmox-insecure": fmt.Sprint(t.insecure)}
	if t.caFile != "" {
		args["--proxmox-root-cert-file"] = path.Join(ProxmoxCAMount, ProxmoxCAKey)
		ops := []map[string]any{
			{"op": "add", "path": "/spec/template/spec/volumes/-", "value": map[string]any{
				"name": caVolume, "configMap": map[string]any{"name": ProxmoxCA},
			}},
			{"op": "add", "path": "/spec/template/spec/containers/0/volumeMounts/-", "value": map[string]any{
				"name": caVolume, "mountPath": ProxmoxCAMount, "readOnly": true,
			}},
		}
		raw, _ := yaml.Marshal(ops) // plain maps: cannot fail
		addPatch(spec, map[string]any{"group": "apps", "version": "v1", "kind": "Deployment", "name": CAPMOXDeployment}, string(raw))
	}
	spec["deployment"] = map[string]any{"containers": []any{map[string]any{"name": "manager", "args": args}}}
}
