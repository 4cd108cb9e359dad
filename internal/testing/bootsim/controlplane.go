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
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/labctl/labctl/internal/testing/testbed"
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

// controlPlane is one control-plane machine of a stacked control plane,
// as kubeadm init or kubeadm join --control-plane leaves it running:
// etcd, kube-apiserver, kube-controller-manager and kube-scheduler from
// the test bed's binaries of the Kubernetes version the cluster's
// ClusterConfiguration names.
type controlPlane struct {
	node    string
	version string
	nodeIP  net.IP
	apiAddr string // nodeIP:bindPort, where its kube-apiserver listens
	dir     string
	// admin is super-admin.conf's client aimed at this machine's own API
	// server, for its readiness and version; made once, as kube-vip's
	// stand-in asks every half second.
	admin *kubernetes.Clientset
	procs []*proc
	// kubelet is the kubelet API on nodeIP:10250, forwarded to kwok,
	// which plays every Node's kubelet.
	kubelet net.Listener
}

type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan error
}

// exited says whether the process has ended, and how, without waiting;
// it leaves the result for the next look.
func (p *proc) exited() (bool, error) {
	select {
	case err := <-p.done:
		p.done <- err
		return true, err
	default:
		return false, nil
	}
}

// memberSpec is what a control-plane machine starts from.
type memberSpec struct {
	// cluster is the ClusterConfiguration: init's from its config file,
	// a join's from the cluster's kubeadm-config, as kubeadm reads it.
	cluster  *ClusterConfiguration
	node     string
	nodeIP   net.IP
	bindPort int32
	files    map[string][]byte // write_files
	assets   string            // the test bed's binaries
	dir      string
	// joinEtcd adds the machine's etcd member to the running cluster and
	// returns etcd's --initial-cluster and how to promote the learner
	// (kubeadm join); nil for kubeadm init, which starts a new cluster.
	joinEtcd func(ctx context.Context, peerURL string) (initialCluster string, promote func(context.Context) error, err error)
}

// startControlPlane does what kubeadm init's (or kubeadm join
// --control-plane's) certs, kubeconfig, etcd and control-plane phases do,
// and runs the static pods' binaries as the kubelet would run their
// manifests: those of the version the ClusterConfiguration names, which
// the test bed must have built (KubernetesAssets). On an error, whatever
// it started is stopped again.
func startControlPlane(ctx context.Context, m memberSpec) (_ *controlPlane, err error) {
	cc := m.cluster
	host, _, err := net.SplitHostPort(cc.ControlPlaneEndpoint)
	if err != nil {
		return nil, fmt.Errorf("controlPlaneEndpoint %q: %w", cc.ControlPlaneEndpoint, err)
	}
	vip := net.ParseIP(host)
	if vip == nil || !vip.IsLoopback() || !m.nodeIP.IsLoopback() {
		return nil, fmt.Errorf("controlPlaneEndpoint %s and node address %s: the stand-in serves only loopback addresses (127.0.0.0/8); map the lab onto loopback", host, m.nodeIP)
	}
	bins := map[string]string{}
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if bins[name], err = testbed.KubernetesBinary(m.assets, cc.KubernetesVersion, name); err != nil {
			return nil, fmt.Errorf("ClusterConfiguration kubernetesVersion %s: %w", cc.KubernetesVersion, err)
		}
	}
	if m.bindPort == 0 {
		m.bindPort = 6443 // v1beta4 DefaultAPIBindPort
	}
	ip := m.nodeIP.String()
	cp := &controlPlane{node: m.node, version: cc.KubernetesVersion, nodeIP: m.nodeIP, dir: m.dir,
		apiAddr: net.JoinHostPort(ip, fmt.Sprint(m.bindPort))}
	defer func() {
		if err != nil {
			cp.stop()
		}
	}()
	pkiPath := filepath.Join(m.dir, "pki")
	if err := os.MkdirAll(filepath.Join(pkiPath, "etcd"), 0o700); err != nil {
		return nil, err
	}
	for _, f := range clusterPKI {
		data, ok := m.files[pkiDir+"/"+f]
		if !ok {
			return nil, fmt.Errorf("user-data's write_files lacks %s/%s, which Cluster API hands every control-plane machine", pkiDir, f)
		}
		if err := os.WriteFile(filepath.Join(pkiPath, f), data, 0o600); err != nil {
			return nil, err
		}
	}
	ca, err := loadCA(m.files, "ca")
	if err != nil {
		return nil, err
	}
	etcdCA, err := loadCA(m.files, "etcd/ca")
	if err != nil {
		return nil, err
	}
	proxyCA, err := loadCA(m.files, "front-proxy-ca")
	if err != nil {
		return nil, err
	}
	caPEM := m.files[pkiDir+"/ca.crt"]

	svcCIDR := cc.Networking.ServiceSubnet
	if svcCIDR == "" {
		svcCIDR = "10.96.0.0/12" // v1beta4 DefaultServicesSubnet
	}
	_, svcNet, err := net.ParseCIDR(strings.Split(svcCIDR, ",")[0])
	if err != nil {
		return nil, fmt.Errorf("ClusterConfiguration networking.serviceSubnet %q: %w", svcCIDR, err)
	}
	svcIP := append(net.IP(nil), svcNet.IP.To4()...)
	svcIP[3]++
	dnsDomain := cc.Networking.DNSDomain
	if dnsDomain == "" {
		dnsDomain = "cluster.local"
	}
	nodeName := m.node

	// The leaves of cmd/kubeadm/app/phases/certs/certlist.go (names,
	// subjects, usages and SANs as GetDefaultCertList and
	// pkiutil.GetAPIServerAltNames / GetEtcdAltNames make them).
	server, client := x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth
	apiNames := append([]string{nodeName, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + dnsDomain}, cc.APIServer.CertSANs...)
	leaves := []struct {
		file    string
		ca      *pki.CA
		subject pkix.Name
		dns     []string
		ips     []net.IP
		usages  []x509.ExtKeyUsage
	}{
		{"apiserver", ca, pkix.Name{CommonName: "kube-apiserver"}, apiNames, []net.IP{svcIP, m.nodeIP, vip}, []x509.ExtKeyUsage{server}},
		{"apiserver-kubelet-client", ca, pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"kubeadm:cluster-admins"}}, nil, nil, []x509.ExtKeyUsage{client}},
		{"apiserver-etcd-client", etcdCA, pkix.Name{CommonName: "kube-apiserver-etcd-client"}, nil, nil, []x509.ExtKeyUsage{client}},
		{"front-proxy-client", proxyCA, pkix.Name{CommonName: "front-proxy-client"}, nil, nil, []x509.ExtKeyUsage{client}},
		{"etcd/server", etcdCA, pkix.Name{CommonName: nodeName}, []string{nodeName, "localhost"}, []net.IP{m.nodeIP, net.IPv4(127, 0, 0, 1)}, []x509.ExtKeyUsage{server, client}},
		{"etcd/peer", etcdCA, pkix.Name{CommonName: nodeName}, []string{nodeName, "localhost"}, []net.IP{m.nodeIP, net.IPv4(127, 0, 0, 1)}, []x509.ExtKeyUsage{server, client}},
		{"etcd/healthcheck-client", etcdCA, pkix.Name{CommonName: "kube-etcd-healthcheck-client"}, nil, nil, []x509.ExtKeyUsage{client}},
	}
	for _, l := range leaves {
		p, err := l.ca.Leaf(l.subject, l.dns, l.ips, l.usages...)
		if err != nil {
			return nil, fmt.Errorf("making %s: %w", l.file, err)
		}
		if err := writePair(filepath.Join(pkiPath, l.file), p); err != nil {
			return nil, err
		}
	}

	// The kubeconfig files of cmd/kubeadm/app/phases/kubeconfig
	// (kubeconfig.go getKubeConfigSpecsBase): admin and super-admin reach
	// the cluster at the control-plane endpoint, controller-manager and
	// scheduler their own machine's API server (the local API endpoint).
	endpoint := "https://" + cc.ControlPlaneEndpoint
	local := "https://" + cp.apiAddr
	kubeconfigs := map[string]struct {
		server string
		subj   pkix.Name
	}{
		"super-admin.conf":        {endpoint, pkix.Name{CommonName: "kubernetes-super-admin", Organization: []string{"system:masters"}}},
		"admin.conf":              {endpoint, pkix.Name{CommonName: "kubernetes-admin", Organization: []string{"kubeadm:cluster-admins"}}},
		"controller-manager.conf": {local, pkix.Name{CommonName: "system:kube-controller-manager"}},
		"scheduler.conf":          {local, pkix.Name{CommonName: "system:kube-scheduler"}},
	}
	for file, k := range kubeconfigs {
		p, err := ca.Leaf(k.subj, nil, nil, client)
		if err != nil {
			return nil, fmt.Errorf("making %s: %w", file, err)
		}
		if err := writeKubeconfig(filepath.Join(m.dir, file), cc.ClusterName, k.server, caPEM, p); err != nil {
			return nil, err
		}
	}
	adminCfg, err := clientcmd.BuildConfigFromFlags(local, filepath.Join(m.dir, "super-admin.conf"))
	if err != nil {
		return nil, err
	}
	if cp.admin, err = kubernetes.NewForConfig(adminCfg); err != nil {
		return nil, err
	}

	pk := func(f string) string { return filepath.Join(pkiPath, f) }
	// etcd as cmd/kubeadm/app/phases/etcd/local.go getEtcdCommand; a
	// joining machine's member is first added to the running cluster
	// (CreateStackedEtcdStaticPodManifestFile).
	peerURL := "https://" + ip + ":2380"
	initialCluster, state, promote := nodeName+"="+peerURL, "new", func(context.Context) error { return nil }
	if m.joinEtcd != nil {
		if initialCluster, promote, err = m.joinEtcd(ctx, peerURL); err != nil {
			return nil, fmt.Errorf("adding etcd member %s: %w", nodeName, err)
		}
		state = "existing"
	}
	if err := cp.run(filepath.Join(m.assets, "etcd"),
		"--name="+nodeName,
		"--data-dir="+filepath.Join(m.dir, "etcd"),
		"--advertise-client-urls=https://"+ip+":2379",
		"--listen-client-urls=https://"+ip+":2379",
		"--initial-advertise-peer-urls="+peerURL,
		"--listen-peer-urls="+peerURL,
		"--initial-cluster="+initialCluster,
		"--initial-cluster-state="+state,
		"--listen-metrics-urls=http://"+ip+":2381",
		"--client-cert-auth=true", "--peer-client-cert-auth=true",
		"--cert-file="+pk("etcd/server.crt"), "--key-file="+pk("etcd/server.key"), "--trusted-ca-file="+pk("etcd/ca.crt"),
		"--peer-cert-file="+pk("etcd/peer.crt"), "--peer-key-file="+pk("etcd/peer.key"), "--peer-trusted-ca-file="+pk("etcd/ca.crt"),
		"--snapshot-count=10000",
	); err != nil {
		return nil, err
	}
	if err := promote(ctx); err != nil {
		return nil, fmt.Errorf("promoting etcd member %s: %w\n%s", nodeName, err, cp.logs())
	}
	// kube-apiserver as cmd/kubeadm/app/phases/controlplane/manifests.go
	// getAPIServerCommand, on the machine's own address; the endpoint's
	// address is kube-vip's (vip.go). The ClusterConfiguration's extraArgs
	// come after.
	apiArgs := []string{
		"--advertise-address=" + ip,
		"--bind-address=" + ip,
		"--secure-port=" + fmt.Sprint(m.bindPort),
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
	if err := cp.run(bins["kube-apiserver"], append(apiArgs, extraArgs(cc.APIServer.ExtraArgs)...)...); err != nil {
		return nil, err
	}
	if err := cp.waitReady(ctx); err != nil {
		return nil, err
	}
	// What runs is the version asked for, by the binary's own word: the
	// test bed stamps each build as Kubernetes' release build does.
	v, err := cp.admin.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("the API server's /version: %w", err)
	}
	if v.GitVersion != cc.KubernetesVersion {
		return nil, fmt.Errorf("kubernetesVersion %s, but the test bed's %s says it is %s", cc.KubernetesVersion, bins["kube-apiserver"], v.GitVersion)
	}
	// kube-controller-manager as getControllerManagerCommand: the
	// bootstrapsigner signs cluster-info for kubeadm join's discovery and
	// nodeipam cuts each Node's podCIDR from networking.podSubnet.
	cmArgs := []string{
		"--kubeconfig=" + filepath.Join(m.dir, "controller-manager.conf"),
		"--authentication-kubeconfig=" + filepath.Join(m.dir, "controller-manager.conf"),
		"--authorization-kubeconfig=" + filepath.Join(m.dir, "controller-manager.conf"),
		"--bind-address=" + ip,
		"--client-ca-file=" + pk("ca.crt"),
		"--cluster-name=" + cc.ClusterName,
		"--cluster-signing-cert-file=" + pk("ca.crt"),
		"--cluster-signing-key-file=" + pk("ca.key"),
		"--controllers=*,bootstrapsigner,tokencleaner",
		// Not kubeadm's: the bootstrapsigner drops a failed update of
		// cluster-info at V(3), and a join that waits on it is what the
		// upgrade tests have seen fail (docs/upgrades.md).
		"--vmodule=bootstrapsigner=5",
		"--leader-elect=true",
		"--requestheader-client-ca-file=" + pk("front-proxy-ca.crt"),
		"--root-ca-file=" + pk("ca.crt"),
		"--service-account-private-key-file=" + pk("sa.key"),
		"--service-cluster-ip-range=" + svcCIDR,
		"--use-service-account-credentials=true",
	}
	if pod := cc.Networking.PodSubnet; pod != "" {
		cmArgs = append(cmArgs, "--allocate-node-cidrs=true", "--cluster-cidr="+pod)
	}
	if err := cp.run(bins["kube-controller-manager"], append(cmArgs, extraArgs(cc.ControllerManager.ExtraArgs)...)...); err != nil {
		return nil, err
	}
	// kube-scheduler as getSchedulerCommand.
	if err := cp.run(bins["kube-scheduler"], append([]string{
		"--kubeconfig=" + filepath.Join(m.dir, "scheduler.conf"),
		"--authentication-kubeconfig=" + filepath.Join(m.dir, "scheduler.conf"),
		"--authorization-kubeconfig=" + filepath.Join(m.dir, "scheduler.conf"),
		"--bind-address=" + ip,
		"--leader-elect=true",
	}, extraArgs(cc.Scheduler.ExtraArgs)...)...); err != nil {
		return nil, err
	}
	return cp, nil
}

// loadCA reads the cluster CA name (ca, etcd/ca, front-proxy-ca) from
// write_files.
func loadCA(files map[string][]byte, name string) (*pki.CA, error) {
	ca, err := pki.LoadCA(files[pkiDir+"/"+name+".crt"], files[pkiDir+"/"+name+".key"])
	if err != nil {
		return nil, fmt.Errorf("%s/%s.crt and .key: %w", pkiDir, name, err)
	}
	return ca, nil
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
func (cp *controlPlane) run(bin string, args ...string) error {
	name := filepath.Base(bin)
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

// ready is one look at the machine's API server's /readyz: ready means it
// serves, with its etcd member in the cluster.
func (cp *controlPlane) ready(ctx context.Context) bool {
	body, err := cp.admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err == nil && string(body) == "ok"
}

// waitReady waits for the API server's /readyz, failing early when a
// process exits.
func (cp *controlPlane) waitReady(ctx context.Context) error {
	cs := cp.admin
	deadline := time.Now().Add(2 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		for _, p := range cp.procs {
			if exited, err := p.exited(); exited {
				return fmt.Errorf("%s exited: %v\n%s", p.name, err, runner.Tail(p.log, 30))
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
	return fmt.Errorf("the workload API server at %s is not ready after 2 minutes: %v", cp.apiAddr, last)
}

// stop ends the processes, newest first (the API server before etcd):
// SIGTERM, then SIGKILL after 10 s.
func (cp *controlPlane) stop() {
	if cp.kubelet != nil {
		_ = cp.kubelet.Close()
		cp.kubelet = nil
	}
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
		state := "running"
		if exited, err := p.exited(); exited {
			state = fmt.Sprintf("exited: %v", err)
		}
		fmt.Fprintf(&b, "--- %s, %s (%s):\n%s\n", p.name, state, p.log, runner.Tail(p.log, 20))
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

// signerLog is the bootstrapsigner's lines in the machine's
// kube-controller-manager log, the last n.
func (cp *controlPlane) signerLog(n int) string {
	for _, p := range cp.procs {
		if !strings.HasPrefix(p.name, "kube-controller-manager") {
			continue
		}
		data, err := os.ReadFile(p.log)
		if err != nil {
			return err.Error()
		}
		var lines []string
		for l := range strings.Lines(string(data)) {
			if strings.Contains(l, "bootstrapsigner.go") {
				lines = append(lines, strings.TrimRight(l, "\n"))
			}
		}
		return runner.TailLines(strings.Join(lines, "\n"), n)
	}
	return ""
}
