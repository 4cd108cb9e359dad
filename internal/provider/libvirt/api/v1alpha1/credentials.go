package v1alpha1

import corev1 "k8s.io/api/core/v1"

// Keys of a host's credentials Secret (LibvirtHost.CredentialsRef):
// kubernetes.io/ssh-auth's key and known_hosts for qemu+ssh;
// kubernetes.io/tls's keys and ca.crt for qemu+tls.
const (
	KeySSHPrivateKey = corev1.SSHAuthPrivateKey // ssh-privatekey
	KeyKnownHosts    = "known_hosts"
	KeyCA            = "ca.crt"
	KeyTLSCert       = corev1.TLSCertKey       // tls.crt
	KeyTLSKey        = corev1.TLSPrivateKeyKey // tls.key
)
