package clusterapi

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

const (
	kubeVipManifestPath = "/etc/kubernetes/manifests/kube-vip.yaml"
	kubeVipImage        = "ghcr.io/kube-vip/kube-vip"
	adminConf           = "/etc/kubernetes/admin.conf"
	superAdminConf      = "/etc/kubernetes/super-admin.conf"
)

// kubeadm ≥ 1.29 gives admin.conf its rights only once the control plane
// is up, which kube-vip must bring up first: on the init node (the one with
// /run/kubeadm/kubeadm.yaml) kube-vip uses super-admin.conf during
// 'kubeadm init', and admin.conf again afterwards. Only hostPath.path
// matches "path: " (mountPath has a capital P).
var (
	kubeVipUseSuperAdmin = fmt.Sprintf("if [ -f /run/kubeadm/kubeadm.yaml ]; then sed -i 's#path: %s#path: %s#' %s; fi", adminConf, superAdminConf, kubeVipManifestPath)
	kubeVipUseAdmin      = fmt.Sprintf("if [ -f /run/kubeadm/kubeadm.yaml ]; then sed -i 's#path: %s#path: %s#' %s; fi", superAdminConf, adminConf, kubeVipManifestPath)
)

// kubeVipManifest is the kube-vip static pod that holds the VIP by ARP
// with leader election among the control-plane nodes.
func kubeVipManifest(vip, version string) string {
	env := func(k, v string) corev1.EnvVar { return corev1.EnvVar{Name: k, Value: v} }
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "kube-vip", Namespace: "kube-system"},
		Spec: corev1.PodSpec{
			HostNetwork: true,
			HostAliases: []corev1.HostAlias{{IP: "127.0.0.1", Hostnames: []string{"kubernetes"}}},
			Containers: []corev1.Container{{
				Name:            "kube-vip",
				Image:           kubeVipImage + ":" + version,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Args:            []string{"manager"},
				Env: []corev1.EnvVar{
					env("address", vip),
					env("port", fmt.Sprint(APIServerPort)),
					// Empty: kube-vip takes the interface of the default route.
					env("vip_interface", ""),
					env("vip_arp", "true"),
					env("cp_enable", "true"),
					env("vip_leaderelection", "true"),
					env("vip_leaseduration", "15"),
					env("vip_renewdeadline", "10"),
					env("vip_retryperiod", "2"),
				},
				SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
					Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"},
				}},
				VolumeMounts: []corev1.VolumeMount{{Name: "kubeconfig", MountPath: adminConf}},
			}},
			Volumes: []corev1.Volume{{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: adminConf, Type: ptr.To(corev1.HostPathFileOrCreate)},
			}}},
		},
	}
	data, err := yaml.Marshal(pod)
	if err != nil {
		// A fixed Go struct always marshals; keep the error visible anyway.
		return "# kube-vip manifest could not be written: " + err.Error()
	}
	return string(data)
}
