package bootsim

import (
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Action is what the bootstrap data has kubeadm do.
type Action string

const (
	// Init is `kubeadm init`: the first control-plane machine.
	Init Action = "init"
	// Join is `kubeadm join`: every other machine.
	Join Action = "join"
)

// kubeadm's v1beta4 types, as much of them as the stand-in reads
// (k8s.io/kubernetes v1.35.4 cmd/kubeadm/app/apis/kubeadm/v1beta4/
// types.go). Cluster API's kubeadm bootstrap provider v1.12.10 writes
// v1beta4 for Kubernetes v1.31 and later.
const kubeadmAPIVersion = "kubeadm.k8s.io/v1beta4"

type kubeadmArg struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type nodeRegistration struct {
	Name string `json:"name"`
	// Taints nil means kubeadm's default; an empty list means none
	// (v1beta4 NodeRegistrationOptions.Taints).
	Taints           *[]corev1.Taint `json:"taints"`
	KubeletExtraArgs []kubeadmArg    `json:"kubeletExtraArgs"`
}

type apiEndpoint struct {
	AdvertiseAddress string `json:"advertiseAddress"`
	BindPort         int32  `json:"bindPort"`
}

// ClusterConfiguration is kubeadm's ClusterConfiguration as the bootstrap
// data carries it; Raw is the document itself.
type ClusterConfiguration struct {
	KubernetesVersion    string `json:"kubernetesVersion"`
	ControlPlaneEndpoint string `json:"controlPlaneEndpoint"`
	ClusterName          string `json:"clusterName"`
	CertificatesDir      string `json:"certificatesDir"`
	Networking           struct {
		ServiceSubnet string `json:"serviceSubnet"`
		PodSubnet     string `json:"podSubnet"`
		DNSDomain     string `json:"dnsDomain"`
	} `json:"networking"`
	APIServer struct {
		CertSANs  []string     `json:"certSANs"`
		ExtraArgs []kubeadmArg `json:"extraArgs"`
	} `json:"apiServer"`
	ControllerManager struct {
		ExtraArgs []kubeadmArg `json:"extraArgs"`
	} `json:"controllerManager"`
	Scheduler struct {
		ExtraArgs []kubeadmArg `json:"extraArgs"`
	} `json:"scheduler"`
	Raw string `json:"-"`
}

type initConfiguration struct {
	NodeRegistration nodeRegistration `json:"nodeRegistration"`
	LocalAPIEndpoint apiEndpoint      `json:"localAPIEndpoint"`
}

type joinConfiguration struct {
	NodeRegistration nodeRegistration `json:"nodeRegistration"`
	Discovery        struct {
		BootstrapToken *struct {
			Token                    string   `json:"token"`
			APIServerEndpoint        string   `json:"apiServerEndpoint"`
			CACertHashes             []string `json:"caCertHashes"`
			UnsafeSkipCAVerification bool     `json:"unsafeSkipCAVerification"`
		} `json:"bootstrapToken"`
	} `json:"discovery"`
	ControlPlane *struct {
		LocalAPIEndpoint apiEndpoint `json:"localAPIEndpoint"`
	} `json:"controlPlane"`
}

// Bootstrap is what a machine's cloud-init would have kubeadm and the
// kubelet do, read from its user-data and meta-data.
type Bootstrap struct {
	Action Action
	// Cluster is the ClusterConfiguration (init only).
	Cluster *ClusterConfiguration
	// Files are write_files by path (the cluster PKI among them).
	Files map[string][]byte
	// Node is the Node the kubelet registers.
	Node NodeSpec
	// APIServerEndpoint is where a joining machine finds the cluster
	// (discovery.bootstrapToken.apiServerEndpoint); for init, the
	// ClusterConfiguration's controlPlaneEndpoint.
	APIServerEndpoint string
	// Token and CACertHashes are a join's bootstrap-token discovery.
	Token        string
	CACertHashes []string
	// AdvertiseAddress is init's localAPIEndpoint.advertiseAddress, ""
	// for kubeadm's default (the node's address).
	AdvertiseAddress string
	// BindPort is a control-plane machine's localAPIEndpoint.bindPort,
	// 0 for kubeadm's default (6443).
	BindPort int32
}

// NodeSpec is the Node as the kubelet registers it.
type NodeSpec struct {
	Name       string
	ProviderID string
	Labels     map[string]string
	Taints     []corev1.Taint
	// ControlPlane: kubeadm marks it (labels and taints of the
	// control-plane).
	ControlPlane bool
}

var kubeadmCmd = regexp.MustCompile(`\bkubeadm (init|join) --config (\S+)`)

// ParseBootstrap reads a machine's seed as cloud-init and kubeadm would
// act on it: renders the user-data with the meta-data, finds the kubeadm
// command in runcmd and its --config file in write_files, and works out
// the Node the kubelet registers. An error says why the machine would not
// come up (or why the stand-in cannot tell).
func ParseBootstrap(seed *Seed) (*Bootstrap, error) {
	md, err := ParseMetaData(seed.MetaData)
	if err != nil {
		return nil, err
	}
	rendered, err := RenderUserData(seed.UserData, md)
	if err != nil {
		return nil, err
	}
	cc, err := ParseCloudConfig(rendered)
	if err != nil {
		return nil, err
	}
	b := &Bootstrap{Files: map[string][]byte{}}
	for _, f := range cc.WriteFiles {
		b.Files[f.Path] = []byte(f.Content)
	}
	var cfgPath string
	for _, c := range cc.Commands() {
		if m := kubeadmCmd.FindStringSubmatch(c); m != nil {
			b.Action, cfgPath = Action(m[1]), m[2]
			break
		}
	}
	if b.Action == "" {
		return nil, fmt.Errorf("user-data's runcmd runs neither kubeadm init nor kubeadm join: %q", cc.Commands())
	}
	cfg, ok := b.Files[cfgPath]
	if !ok {
		return nil, fmt.Errorf("kubeadm %s --config %s: user-data's write_files has no such file", b.Action, cfgPath)
	}
	docs, err := kubeadmDocs(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeadm %s --config %s: %w", b.Action, cfgPath, err)
	}
	hostname := strings.ToLower(strings.TrimSpace(md.Hostname()))
	if hostname == "" {
		return nil, fmt.Errorf("meta-data has no local-hostname, so the guest has no name for its Node")
	}
	var reg nodeRegistration
	switch b.Action {
	case Init:
		raw, ok := docs["ClusterConfiguration"]
		if !ok {
			return nil, fmt.Errorf("kubeadm init --config %s: no ClusterConfiguration", cfgPath)
		}
		b.Cluster = &ClusterConfiguration{Raw: raw}
		if err := yaml.Unmarshal([]byte(raw), b.Cluster); err != nil {
			return nil, fmt.Errorf("kubeadm init --config %s: ClusterConfiguration: %w", cfgPath, err)
		}
		var ic initConfiguration
		if err := yaml.Unmarshal([]byte(docs["InitConfiguration"]), &ic); err != nil {
			return nil, fmt.Errorf("kubeadm init --config %s: InitConfiguration: %w", cfgPath, err)
		}
		reg = ic.NodeRegistration
		b.Node.ControlPlane = true
		b.APIServerEndpoint = b.Cluster.ControlPlaneEndpoint
		b.AdvertiseAddress, b.BindPort = ic.LocalAPIEndpoint.AdvertiseAddress, ic.LocalAPIEndpoint.BindPort
		if b.APIServerEndpoint == "" {
			return nil, fmt.Errorf("kubeadm init --config %s: ClusterConfiguration has no controlPlaneEndpoint", cfgPath)
		}
	case Join:
		raw, ok := docs["JoinConfiguration"]
		if !ok {
			return nil, fmt.Errorf("kubeadm join --config %s: no JoinConfiguration", cfgPath)
		}
		var jc joinConfiguration
		if err := yaml.Unmarshal([]byte(raw), &jc); err != nil {
			return nil, fmt.Errorf("kubeadm join --config %s: JoinConfiguration: %w", cfgPath, err)
		}
		reg = jc.NodeRegistration
		if b.Node.ControlPlane = jc.ControlPlane != nil; b.Node.ControlPlane {
			b.BindPort = jc.ControlPlane.LocalAPIEndpoint.BindPort
		}
		bt := jc.Discovery.BootstrapToken
		if bt == nil || bt.APIServerEndpoint == "" || bt.Token == "" {
			return nil, fmt.Errorf("kubeadm join --config %s: no discovery.bootstrapToken with token and apiServerEndpoint", cfgPath)
		}
		b.APIServerEndpoint, b.Token, b.CACertHashes = bt.APIServerEndpoint, bt.Token, bt.CACertHashes
		if len(bt.CACertHashes) == 0 && !bt.UnsafeSkipCAVerification {
			// kubeadm's discovery/token refuses this (validation of
			// JoinConfiguration: caCertHashes or unsafeSkipCAVerification).
			return nil, fmt.Errorf("kubeadm join --config %s: discovery.bootstrapToken has no caCertHashes and unsafeSkipCAVerification is false", cfgPath)
		}
	}
	b.Node, err = nodeSpec(reg, hostname, b.Node.ControlPlane)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// kubeadmDocs splits a kubeadm config file into its documents by kind;
// each must be kubeadm.k8s.io/v1beta4.
func kubeadmDocs(data []byte) (map[string]string, error) {
	out := map[string]string{}
	for _, doc := range strings.Split("\n"+string(data), "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var tm struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return nil, fmt.Errorf("not YAML: %w", err)
		}
		if tm.APIVersion != kubeadmAPIVersion {
			return nil, fmt.Errorf("%s is %q; this stand-in reads %s (what Cluster API v1.12 writes for Kubernetes v1.31+)", tm.Kind, tm.APIVersion, kubeadmAPIVersion)
		}
		out[tm.Kind] = strings.TrimLeft(doc, "\n")
	}
	return out, nil
}

// Well-known names kubeadm and the kubelet use (k8s.io/kubernetes v1.35.4
// cmd/kubeadm/app/constants/constants.go and k8s.io/api/core/v1
// well_known_labels.go / well_known_taints.go).
const (
	LabelControlPlane        = "node-role.kubernetes.io/control-plane"
	LabelExcludeFromLBs      = "node.kubernetes.io/exclude-from-external-load-balancers"
	labelHostname            = "kubernetes.io/hostname"
	defaultControlPlaneTaint = LabelControlPlane
)

// nodeSpec is the Node the kubelet registers from kubeadm's node
// registration: its name is nodeRegistration.name or the hostname
// (kubeadm's SetNodeRegistrationDynamicDefaults and the kubelet's
// GetHostname both lower-case it); --provider-id and --node-labels come
// from kubeletExtraArgs, which kubeadm writes into
// /var/lib/kubelet/kubeadm-flags.env (cmd/kubeadm/app/phases/kubelet/
// flags.go) and systemd splits into the kubelet's argv; the taints are
// nodeRegistration.taints, defaulting to the control-plane taint on a
// control-plane node and to none elsewhere (v1beta4 defaults.go
// SetDefaults_NodeRegistration, kubeadm's mark-control-plane phase); a
// control-plane Node also gets kubeadm's control-plane labels
// (cmd/kubeadm/app/phases/markcontrolplane/markcontrolplane.go).
func nodeSpec(reg nodeRegistration, hostname string, controlPlane bool) (NodeSpec, error) {
	n := NodeSpec{Name: hostname, ControlPlane: controlPlane, Labels: map[string]string{}}
	if reg.Name != "" {
		n.Name = strings.ToLower(reg.Name)
	}
	if strings.Contains(n.Name, MissingJinjaVar) || strings.Contains(n.Name, "{{") {
		return n, fmt.Errorf("nodeRegistration.name %q did not render", n.Name)
	}
	args := map[string]string{}
	for _, a := range reg.KubeletExtraArgs {
		args[a.Name] = a.Value
	}
	pid, ok := args["provider-id"]
	if !ok {
		return n, fmt.Errorf("kubeletExtraArgs has no provider-id: the kubelet would register Node %s without one and Cluster API would never match it to its Machine", n.Name)
	}
	words, err := systemdWords("--provider-id=" + pid)
	if err != nil || len(words) != 1 {
		return n, fmt.Errorf("kubeletExtraArgs provider-id %q does not make one kubelet argument (systemd splits it into %q): %v", pid, words, err)
	}
	n.ProviderID = strings.TrimPrefix(words[0], "--provider-id=")
	if err := resolved(n.ProviderID); err != nil {
		return n, fmt.Errorf("kubeletExtraArgs provider-id %q: %w", pid, err)
	}
	if v := args["node-labels"]; v != "" {
		for _, kv := range strings.Split(v, ",") {
			k, val, _ := strings.Cut(kv, "=")
			n.Labels[strings.TrimSpace(k)] = strings.TrimSpace(val)
		}
	}
	n.Labels[labelHostname] = n.Name
	n.Labels["kubernetes.io/os"] = "linux"
	n.Labels["kubernetes.io/arch"] = "amd64"
	n.Labels["beta.kubernetes.io/os"] = "linux"
	n.Labels["beta.kubernetes.io/arch"] = "amd64"
	if controlPlane {
		n.Labels[LabelControlPlane] = ""
		n.Labels[LabelExcludeFromLBs] = ""
	}
	switch {
	case reg.Taints != nil:
		n.Taints = append(n.Taints, *reg.Taints...)
	case controlPlane:
		n.Taints = []corev1.Taint{{Key: defaultControlPlaneTaint, Effect: corev1.TaintEffectNoSchedule}}
	}
	sort.Slice(n.Taints, func(i, j int) bool { return n.Taints[i].Key < n.Taints[j].Key })
	return n, nil
}

// resolved checks a providerID as the machine would leave it: cloud-init
// renders an unknown variable as CI_MISSING_JINJA_VAR/..., and without
// the Jinja header the braces stay; either way the kubelet registers a
// providerID no ProxmoxMachine has.
func resolved(pid string) error {
	switch {
	case strings.Contains(pid, MissingJinjaVar):
		return fmt.Errorf("rendered as %q: cloud-init had no such instance-data variable", pid)
	case strings.Contains(pid, "{{") || strings.Contains(pid, "}}"):
		return fmt.Errorf("rendered as %q: cloud-init did not render it (user-data lacks the %q header?)", pid, jinjaHeader)
	}
	scheme, id, ok := strings.Cut(pid, "://")
	if !ok || scheme == "" || id == "" || strings.ContainsAny(id, " '\"") {
		return fmt.Errorf("rendered as %q, which is no <scheme>://<id> providerID", pid)
	}
	return nil
}

// systemdWords splits a command line as systemd splits an unbraced
// $VARIABLE in ExecStart= (the kubelet unit's $KUBELET_KUBEADM_ARGS):
// at whitespace, with single and double quotes removed wherever they
// appear in a word and backslash escapes taken (systemd's
// extract_first_word with EXTRACT_UNQUOTE|EXTRACT_RELAX, used by
// replace_env_argv). So "--provider-id=proxmox://'abc'" is
// --provider-id=proxmox://abc, as CAPMOX's templates rely on.
func systemdWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for i := 0; i < len(s); i++ {
		c := rune(s[i])
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else if c == '\\' && quote == '"' && i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			} else {
				cur.WriteRune(c)
			}
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			in = true
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(c)
			in = true
		}
	}
	if quote != 0 {
		return out, fmt.Errorf("unbalanced %c quote", quote)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

// NodeAddress is the guest's IPv4 address from CAPMOX's network-config
// (netplan v2, pkg/cloudinit/network.go): the first address of the
// ethernet whose match.macaddress is mac, or of the first ethernet with
// one when mac matches none.
func NodeAddress(networkConfig []byte, mac string) (net.IP, error) {
	var nc struct {
		Network struct {
			Ethernets map[string]struct {
				Match struct {
					MACAddress string `json:"macaddress"`
				} `json:"match"`
				Addresses []string `json:"addresses"`
			} `json:"ethernets"`
		} `json:"network"`
	}
	if err := yaml.Unmarshal(networkConfig, &nc); err != nil {
		return nil, fmt.Errorf("network-config is not YAML: %w", err)
	}
	names := make([]string, 0, len(nc.Network.Ethernets))
	for n := range nc.Network.Ethernets {
		names = append(names, n)
	}
	sort.Strings(names)
	var first net.IP
	for _, n := range names {
		e := nc.Network.Ethernets[n]
		for _, a := range e.Addresses {
			ip, _, err := net.ParseCIDR(a)
			if err != nil || ip.To4() == nil {
				continue
			}
			if strings.EqualFold(e.Match.MACAddress, mac) {
				return ip, nil
			}
			if first == nil {
				first = ip
			}
			break
		}
	}
	if first == nil {
		return nil, fmt.Errorf("network-config gives no ethernet a static IPv4 address")
	}
	return first, nil
}
