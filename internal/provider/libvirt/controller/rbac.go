package controller

// The provider's RBAC, as controller-gen renders it into
// embedded/provider/libvirt/rbac/role.yaml (make generate). The cached
// client watches what it reads (get, list, watch); Secrets are read
// uncached (get only).
//
// +kubebuilder:rbac:groups=infrastructure.labctl.dev,resources=libvirtclusters;libvirtmachines;libvirtmachinetemplates,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.labctl.dev,resources=libvirtclusters/status;libvirtmachines/status;libvirtmachinetemplates/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters;machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddresses;inclusterippools;globalinclusterippools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
