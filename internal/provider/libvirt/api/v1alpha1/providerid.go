package v1alpha1

import (
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// ProviderID is a Node's and a LibvirtMachine's spec.providerID for the
// domain uuid on host: libvirt://<host>/<uuid>.
func ProviderID(host, uuid string) string { return "libvirt://" + host + "/" + uuid }

// DomainUUID is the UUID of the domain a LibvirtMachine stands for: the
// one its spec.providerID records once the domain exists, else its UID,
// which a new domain gets. The providerID comes first because it is
// spec: clusterctl move (and 'labctl mgmt restore') recreate the
// LibvirtMachine with a new UID but the same spec. The provider finds
// the domain by it, and gc and 'mgmt down --cascade' match domains by it.
func DomainUUID(providerID string, uid types.UID) string {
	if rest, ok := strings.CutPrefix(providerID, "libvirt://"); ok {
		if i := strings.LastIndexByte(rest, '/'); i > 0 && i < len(rest)-1 {
			return rest[i+1:]
		}
	}
	return string(uid)
}
