package bootsim

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/labctl/labctl/internal/testing/testbed/pki"
	"github.com/labctl/labctl/internal/testing/testbed/runner"
)

// The cluster PKI Cluster API's kubeadm bootstrap provider hands the
// first control-plane machine in write_files (sigs.k8s.io/cluster-api
// v1.12.10 util/secret/certificates.go: cluster CA, etcd CA, front-proxy
// CA and the service-account key pair, under /etc/kubernetes/pki), as
// kubeadm's "certs" phase finds them already there
// (cmd/kubeadm/app/phases/certs/certlist.go: it makes only the leaves).
const pkiDir = "/etc/kubernetes/pki"

var clusterPKI = []string{
	"ca.crt", "ca.key", "etcd/ca.crt", "etcd/ca.key",
	"front-proxy-ca.crt", "front-proxy-ca.key", "sa.pub", "sa.key",
}

// controlPlane is one workload cluster's control plane, as kubeadm init
// leaves it running on the first machine: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler from the test bed's
// binaries.
type controlPlane struct {
	name     string // the ClusterConfiguration's clusterName
	endpoint string // host:port of controlPlaneEndpoint
	nodeIP   net.IP
	dir      string
	ca       *pki.CA
	caPEM    []byte
	// Admin is super-admin.conf's client (system:masters).
	admin      *rest.Config
	kubeconfig string // super-admin.conf's file
	procs      []*proc
}

type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan error
}

// startControlPlane does what kubeadm init's certs, kubeconfig, etcd and
// control-plane phases do, and runs the static pods' binaries as the
// kubelet would run their manifests.
// On an error, whatever it started is stopped again.
func startControlPlane(ctx context.Context, assets, dir string, b *Bootstrap, nodeIP net.IP) (_ *controlPlane, err error) {
	host, port, err := net.SplitHostPort(b.Cluster.ControlPlaneEndpoint)
	if err != nil {
		return nil, fmt.Errorf("controlPlaneEndpoint %q: %w", b.Cluster.ControlPlaneEndpoint, err)
	}
	vip := net.ParseIP(host)
	if vip == nil || !vip.IsLoopback() || !nodeIP.IsLoopback() {
		return nil, fmt.Errorf("controlPlaneEndpoint %s and node address %s: the stand-in serves only loopback addresses (127.0.0.0/8); map the lab onto loopback", host, nodeIP)
	}
	cp := &controlPlane{name: b.Cluster.ClusterName, endpoint: b.Cluster.ControlPlaneEndpoint, nodeIP: nodeIP, dir: dir}
	defer func() {
		if err != nil {
			cp.stop()
		}
	}()
	pkiPath := filepath.Join(dir, "pki")
	if err := os.MkdirAll(filepath.Join(pkiPath, "etcd"), 0o700); err != nil {
		return nil, err
	}
	for _, f := range clusterPKI {
		data, ok := b.Files[pkiDir+"/"+f]
		if !ok {
			return nil, fmt.Errorf("kubeadm init: user-data's write_files lacks %s/%s, which Cluster API hands the first control-plane machine", pkiDir, f)
		}
		if err := os.WriteFile(filepath.Join(pkiPath, f), data, 0o600); err != nil {
			return nil, err
		}
	}
	load := func(name string) (*pki.CA, error) {
		ca, err := pki.LoadCA(b.Files[pkiDir+"/"+name+".crt"], b.Files[pkiDir+"/"+name+".key"])
		if err != nil {
			return nil, fmt.Errorf("kubeadm init: %s/%s.crt and .key: %w", pkiDir, name, err)
		}
		return ca, nil
	}
	if cp.ca, err = load("ca"); err != nil {
		return nil, err
	}
	cp.caPEM = b.Files[pkiDir+"/ca.crt"]
	etcdCA, err := load("etcd/ca")
	if err != nil {
		return nil, err
	}
	proxyCA, err := load("front-proxy-ca")
	if err != nil {
		return nil, err
	}

	svcCIDR := b.Cluster.Networking.ServiceSubnet
	if svcCIDR == "" {
		svcCIDR = "10.96.0.0/12" // v1beta4 DefaultServicesSubnet
	}
	_, svcNet, err := net.ParseCIDR(strings.Split(svcCIDR, ",")[0])
	if err != nil {
		return nil, fmt.Errorf("ClusterConfiguration networking.serviceSubnet %q: %w", svcCIDR, err)
	}
	svcIP := append(net.IP(nil), svcNet.IP.To4()...)
	svcIP[3]++
	dnsDomain := b.Cluster.Networking.DNSDomain
	if dnsDomain == "" {
		dnsDomain = "cluster.local"
	}
	nodeName := b.Node.Name

	// The leaves of cmd/kubeadm/app/phases/certs/certlist.go (names,
	// subjects, usages and SANs as GetDefaultCertList and
	// pkiutil.GetAPIServerAltNames / GetEtcdAltNames make them).
	server, client := x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth
	apiNames := append([]string{nodeName, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + dnsDomain}, b.Cluster.APIServer.CertSANs...)
	leaves := []struct {
		file    string
		ca      *pki.CA
		subject pkix.Name
		dns     []string
		ips     []net.IP
		usages  []x509.ExtKeyUsage
	}{
		{"apiserver", cp.ca, pkix.Name{CommonName: "kube-apiserver"}, apiNames, []net.IP{svcIP, nodeIP, vip}, []x509.ExtKeyUsage{server}},
		{"apiserver-kubelet-client", cp.ca, pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"kubeadm:cluster-admins"}}, nil, nil, []x509.ExtKeyUsage{client}},
		{"apiserver-etcd-client", etcdCA, pkix.Name{CommonName: "kube-apiserver-etcd-client"}, nil, nil, []x509.ExtKeyUsage{client}},
		{"front-proxy-client", proxyCA, pkix.Name{CommonName: "front-proxy-client"}, nil, nil, []x509.ExtKeyUsage{client}},
		{"etcd/server", etcdCA, pkix.Name{CommonName: nodeName}, []string{nodeName, "localhost"}, []net.IP{nodeIP, net.IPv4(127, 0, 0, 1)}, []x509.ExtKeyUsage{server, client}},
		{"etcd/peer", etcdCA, pkix.Name{CommonName: nodeName}, []string{nodeName, "localhost"}, []net.IP{nodeIP, net.IPv4(127, 0, 0, 1)}, []x509.ExtKeyUsage{server, client}},
		{"etcd/healthcheck-client", etcdCA, pkix.Name{CommonName: "kube-etcd-healthcheck-client"}, nil, nil, []x509.ExtKeyUsage{client}},
	}
	for _, l := range leaves {
		p, err := l.ca.Leaf(l.subject, l.dns, l.ips, l.usages...)
		if err != nil {
			return nil, fmt.Errorf("kubeadm init: making %s: %w", l.file, err)
		}
		if err := writePair(filepath.Join(pkiPath, l.file), p); err != nil {
			return nil, err
		}
	}

	// The kubeconfig files of cmd/kubeadm/app/phases/kubeconfig
	// (kubeconfig.go getKubeConfigSpecsBase): the components' reach the
	// API server at the node's own address in kubeadm; here the
	// apiserver listens on the endpoint only (kube-vip's address), so
	// all of them use the endpoint.
	server6443 := "https://" + b.Cluster.ControlPlaneEndpoint
	kubeconfigs := map[string]pkix.Name{
		"super-admin.conf":        {CommonName: "kubernetes-super-admin", Organization: []string{"system:masters"}},
		"admin.conf":              {CommonName: "kubernetes-admin", Organization: []string{"kubeadm:cluster-admins"}},
		"controller-manager.conf": {CommonName: "system:kube-controller-manager"},
		"scheduler.conf":          {CommonName: "system:kube-scheduler"},
	}
	for file, subj := range kubeconfigs {
		p, err := cp.ca.Leaf(subj, nil, nil, client)
		if err != nil {
			return nil, fmt.Errorf("kubeadm init: making %s: %w", file, err)
		}
		if err := writeKubeconfig(filepath.Join(dir, file), cp.name, server6443, cp.caPEM, p); err != nil {
			return nil, err
		}
	}
	cp.kubeconfig = filepath.Join(dir, "super-admin.conf")
	if cp.admin, err = clientcmd.BuildConfigFromFlags("", cp.kubeconfig); err != nil {
		return nil, err
	}

	ip := nodeIP.String()
	pk := func(f string) string { return filepath.Join(pkiPath, f) }
	// etcd as cmd/kubeadm/app/phases/etcd/local.go getEtcdCommand.
	if err := cp.run(assets, "etcd",
		"--name="+nodeName,
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--advertise-client-urls=https://"+ip+":2379",
		"--listen-client-urls=https://"+ip+":2379",
		"--initial-advertise-peer-urls=https://"+ip+":2380",
		"--listen-peer-urls=https://"+ip+":2380",
		"--initial-cluster="+nodeName+"=https://"+ip+":2380",
		"--listen-metrics-urls=http://"+ip+":2381",
		"--client-cert-auth=true", "--peer-client-cert-auth=true",
		"--cert-file="+pk("etcd/server.crt"), "--key-file="+pk("etcd/server.key"), "--trusted-ca-file="+pk("etcd/ca.crt"),
		"--peer-cert-file="+pk("etcd/peer.crt"), "--peer-key-file="+pk("etcd/peer.key"), "--peer-trusted-ca-file="+pk("etcd/ca.crt"),
		"--snapshot-count=10000",
	); err != nil {
		return nil, err
	}
	// kube-apiserver as cmd/kubeadm/app/phases/controlplane/manifests.go
	// getAPIServerCommand, bound to the endpoint's address, where kube-vip
	// would hold the VIP, and the ClusterConfiguration's extraArgs after.
	apiArgs := []string{
		"--advertise-address=" + ip,
		"--bind-address=" + host,
		"--secure-port=" + port,
		"--allow-privileged=true",
		"--authorization-mode=Node,RBAC",
		"--client-ca-file=" + pk("ca.crt"),
		"--enable-admission-plugins=NodeRestriction",
		"--enable-bootstrap-token-auth=true",
		"--etcd-cafile=" + pk("etcd/ca.crt"),
		"--etcd-certfile=" + pk("apiserver-etcd-client.crt"),
		"--etcd-keyfile=" + pk("apiserver-etcd-client.key"),
		"--etcd-servers=https://" + ip + ":2379",
		"--kubelet-client-certificate=" + pk("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + pk("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--proxy-client-cert-file=" + pk("front-proxy-client.crt"),
		"--proxy-client-key-file=" + pk("front-proxy-client.key"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-client-ca-file=" + pk("front-proxy-ca.crt"),
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--service-account-issuer=https://kubernetes.default.svc." + dnsDomain,
		"--service-account-key-file=" + pk("sa.pub"),
		"--service-account-signing-key-file=" + pk("sa.key"),
		"--service-cluster-ip-range=" + svcCIDR,
		"--tls-cert-file=" + pk("apiserver.crt"),
		"--tls-private-key-file=" + pk("apiserver.key"),
	}
	if err := cp.run(assets, "kube-apiserver", append(apiArgs, extraArgs(b.Cluster.APIServer.ExtraArgs)...)...); err != nil {
		return nil, err
	}
	if err := cp.waitReady(ctx); err != nil {
		return nil, err
	}
	// kube-controller-manager as getControllerManagerCommand: the
	// bootstrapsigner signs cluster-info for kubeadm join's discovery and
	// nodeipam cuts each Node's podCIDR from networking.podSubnet.
	cmArgs := []string{
		"--kubeconfig=" + filepath.Join(dir, "controller-manager.conf"),
		"--authentication-kubeconfig=" + filepath.Join(dir, "controller-manager.conf"),
		"--authorization-kubeconfig=" + filepath.Join(dir, "controller-manager.conf"),
		"--bind-address=" + ip,
		"--client-ca-file=" + pk("ca.crt"),
		"--cluster-name=" + cp.name,
		"--cluster-signing-cert-file=" + pk("ca.crt"),
		"--cluster-signing-key-file=" + pk("ca.key"),
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--leader-elect=true",
		"--requestheader-client-ca-file=" + pk("front-proxy-ca.crt"),
		"--root-ca-file=" + pk("ca.crt"),
		"--service-account-private-key-file=" + pk("sa.key"),
		"--service-cluster-ip-range=" + svcCIDR,
		"--use-service-account-credentials=true",
	}
	if pod := b.Cluster.Networking.PodSubnet; pod != "" {
		cmArgs = append(cmArgs, "--allocate-node-cidrs=true", "--cluster-cidr="+pod)
	}
	if err := cp.run(assets, "kube-controller-manager", append(cmArgs, extraArgs(b.Cluster.ControllerManager.ExtraArgs)...)...); err != nil {
		return nil, err
	}
	// kube-scheduler as getSchedulerCommand.
	if err := cp.run(assets, "kube-scheduler", append([]string{
		"--kubeconfig=" + filepath.Join(dir, "scheduler.conf"),
		"--authentication-kubeconfig=" + filepath.Join(dir, "scheduler.conf"),
		"--authorization-kubeconfig=" + filepath.Join(dir, "scheduler.conf"),
		"--bind-address=" + ip,
		"--leader-elect=true",
	}, extraArgs(b.Cluster.Scheduler.ExtraArgs)...)...); err != nil {
		return nil, err
	}
	return cp, nil
}

func extraArgs(args []kubeadmArg) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		out = append(out, "--"+a.Name+"="+a.Value)
	}
	return out
}

func writePair(base string, p pki.Pair) error {
	if err := os.WriteFile(base+".crt", p.Cert, 0o600); err != nil {
		return err
	}
	return os.WriteFile(base+".key", p.Key, 0o600)
}

func writeKubeconfig(path, cluster, server string, caPEM []byte, p pki.Pair) error {
	user := "user"
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{cluster: {Server: server, CertificateAuthorityData: caPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{user: {ClientCertificateData: p.Cert, ClientKeyData: p.Key}},
		Contexts:       map[string]*clientcmdapi.Context{cluster: {Cluster: cluster, AuthInfo: user}},
		CurrentContext: cluster,
	}
	data, err := clientcmd.Write(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// run starts one control-plane binary with its log in the cluster's
// folder.
func (cp *controlPlane) run(assets, name string, args ...string) error {
	bin := filepath.Join(assets, name)
	logPath := filepath.Join(cp.dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); f.Close() }()
	cp.procs = append(cp.procs, p)
	return nil
}

// waitReady waits for the API server's /readyz, failing early when a
// process exits.
func (cp *controlPlane) waitReady(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(cp.admin)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		for _, p := range cp.procs {
			select {
			case err := <-p.done:
				p.done <- err
				return fmt.Errorf("%s exited: %v\n%s", p.name, err, runner.Tail(p.log, 30))
			default:
			}
		}
		var body []byte
		body, last = cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if last == nil && string(body) == "ok" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
	return fmt.Errorf("the workload API server at %s is not ready after 2 minutes: %v", cp.endpoint, last)
}

// stop ends the processes, newest first (the API server before etcd):
// SIGTERM, then SIGKILL after 10 s.
func (cp *controlPlane) stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	cp.procs = nil
}

// logs are the tails of the processes' logs, for a failed test.
func (cp *controlPlane) logs() string {
	var b strings.Builder
	for _, p := range cp.procs {
		fmt.Fprintf(&b, "--- %s (%s):\n%s\n", p.name, p.log, runner.Tail(p.log, 20))
	}
	return b.String()
}

// caCertHash is kubeadm's public key pin of a CA certificate:
// "sha256:" and the hex SHA-256 of its SubjectPublicKeyInfo
// (cmd/kubeadm/app/util/pubkeypin/pubkeypin.go Hash).
func caCertHash(caPEM []byte) (string, error) {
	blk, _ := pem.Decode(caPEM)
	if blk == nil {
		return "", errors.New("the CA certificate is not PEM")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
