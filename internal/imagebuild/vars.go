// Package imagebuild builds node images with kubernetes-sigs/image-builder
// and Packer: VM templates on Proxmox, which it tags and lists, and qcow2
// images for libvirt hosts, which it uploads into each host's pool
// (qemu.go).
package imagebuild

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/labctl/labctl/internal/config"
)

var semverRe = regexp.MustCompile(`^v(\d+)\.(\d+)\.(\d+)$`)

// Target is image-builder's make target for an image's OS on Proxmox.
func Target(img config.Image) string { return "build-proxmox-" + img.OS }

// QEMUTarget is image-builder's make target for an image's OS as a qcow2,
// the image of libvirt hosts.
func QEMUTarget(img config.Image) string { return "build-qemu-" + img.OS }

// Vars is the Packer variable file for img: image-builder's variable names
// (packer/proxmox/packer.json.tmpl) and never a credential.
func Vars(lab *config.Lab, img config.Image) (map[string]string, error) {
	m := semverRe.FindStringSubmatch(img.KubernetesVersion)
	if m == nil {
		return nil, fmt.Errorf("image %s: kubernetesVersion %q is not vMAJOR.MINOR.PATCH", img.Name, img.KubernetesVersion)
	}
	_, n, err := target(lab, img)
	if err != nil {
		return nil, err
	}
	v := map[string]string{
		"kubernetes_semver":      img.KubernetesVersion,
		"kubernetes_series":      "v" + m[1] + "." + m[2],
		"kubernetes_deb_version": m[1] + "." + m[2] + "." + m[3] + "-1.1",
		"node":                   n.Name,
		"iso_storage_pool":       n.ImageStorage,
		"storage_pool":           n.Storage,
		"bridge":                 n.Bridge,
		// labctl names the template itself, so that it can find it on
		// the API after the build whatever Packer printed.
		"artifact_name": TemplateName(img),
	}
	if lab.Network.VLAN != 0 {
		v["vlan_tag"] = strconv.Itoa(lab.Network.VLAN)
	}
	if img.VMID != 0 {
		v["vmid"] = strconv.Itoa(img.VMID)
	}
	return v, nil
}

// TemplateName is the name image build gives img's template (Packer's
// template_name, from image-builder's artifact_name variable).
func TemplateName(img config.Image) string { return img.Name + "-" + img.KubernetesVersion }

// target finds the Proxmox hypervisor and node img is built on.
func target(lab *config.Lab, img config.Image) (*config.Hypervisor, config.PVENode, error) {
	h, err := lab.Hypervisor(img.Hypervisor)
	if err != nil {
		return nil, config.PVENode{}, fmt.Errorf("image %s: %w", img.Name, err)
	}
	if h.Proxmox == nil {
		return nil, config.PVENode{}, fmt.Errorf("image %s: %s is a libvirt host, not a Proxmox VE hypervisor", img.Name, h.Name)
	}
	for _, n := range h.Proxmox.Nodes {
		if img.Node == "" || n.Name == img.Node {
			return h, n, nil
		}
	}
	return nil, config.PVENode{}, fmt.Errorf("image %s: node %q is not listed under hypervisor %s", img.Name, img.Node, h.Name)
}

// SecretEnv is the child environment variable that carries the token secret.
const SecretEnv = "PROXMOX_TOKEN"

// Env is the child's Proxmox environment (image-builder reads these with
// {{env}}); the token secret goes only here.
func Env(h *config.Hypervisor, n config.PVENode, secret string) map[string]string {
	u := strings.TrimSuffix(h.Proxmox.URL, "/") + "/api2/json"
	return map[string]string{
		"PROXMOX_URL":          u,
		"PROXMOX_USERNAME":     h.Proxmox.TokenID,
		SecretEnv:              secret,
		"PROXMOX_NODE":         n.Name,
		"PROXMOX_ISO_POOL":     n.ImageStorage,
		"PROXMOX_STORAGE_POOL": n.Storage,
		"PROXMOX_BRIDGE":       n.Bridge,
	}
}

// Names are m's keys, sorted.
func Names(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// FindBuilder resolves an image-builder checkout to its images/capi folder,
// which must hold the templates of builder (proxmox, qemu). dir may be the
// repository root or images/capi itself.
func FindBuilder(dir, pin, builder string) (string, error) {
	get := fmt.Sprintf("get it with: git clone --branch %s --depth 1 https://github.com/kubernetes-sigs/image-builder, then pass --image-builder DIR or set images[].imageBuilder", pin)
	if dir == "" {
		return "", fmt.Errorf("no image-builder checkout given; %s", get)
	}
	if strings.HasPrefix(dir, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			dir = filepath.Join(home, dir[2:])
		}
	}
	for _, d := range []string{filepath.Join(dir, "images", "capi"), dir} {
		if st, err := os.Stat(filepath.Join(d, "packer", builder)); err == nil && st.IsDir() {
			if _, err := os.Stat(filepath.Join(d, "Makefile")); err == nil {
				return filepath.Abs(d)
			}
		}
	}
	return "", fmt.Errorf("image-builder not found at %s (no images/capi/Makefile with packer/%s); %s", dir, builder, get)
}

// redactURL drops any userinfo from a URL shown to the user.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = nil
	return u.String()
}
