package packertest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/labctl/labctl/internal/versions"
)

// ui prints what packer 1.9.5 prints for a build, in the mode its argv
// chose. The sources copied (hashicorp/packer v1.9.5):
//   - main.go extractMachineReadable: machine-readable mode is on only when
//     the argument "-machine-readable" is in packer's own argv; no
//     environment variable turns it on.
//   - packer/ui.go MachineReadableUi.Machine: "<unix>,<target>,<type>,<data>"
//     with "," in data as "%!(PACKER_COMMA)" and CR/LF as \r, \n; Say,
//     Message and Error become "ui,say|message|error" lines without a
//     target. (Its LogSecretFilter result is overwritten on the next line,
//     so this mode does not scrub secrets.)
//   - packer/ui.go ColoredUi (bold "\033[1;32m…\033[0m" for the first
//     build's Say and Error in red, "\033[0;32m" for Message) and
//     TargetedUI ("==> NAME: " for Say and Error, "    NAME: " for
//     Message); packer-plugin-sdk packer/ui.go BasicUi prints each message
//     and a newline on stdout, errors too, and only logs Machine calls.
//   - command/build.go: "NAME: output will be in this color." and an empty
//     line first when -color is on (the default), "Build 'NAME' finished
//     after …", then "\n==> Builds finished. The artifacts of successful
//     builds are:" and for each artifact the machine lines artifact-count,
//     artifact,i,builder-id|id|string|files-count|end and the human line
//     "--> NAME: " + Artifact.String().
//   - packer/build.go CoreBuild.Run: a shell-local post-processor keeps its
//     input artifact, so the builder's artifact is listed twice.
//
// The Proxmox plugin's artifact (hashicorp/packer-plugin-proxmox,
// builder/proxmox/common/artifact.go): Id() is the template's VMID and
// String() is "A template was created: <VMID>".
type ui struct {
	machine bool
	color   bool
	w       io.Writer
}

func (u *ui) line(target, typ string, data ...string) {
	for i, d := range data {
		d = strings.ReplaceAll(d, ",", "%!(PACKER_COMMA)")
		d = strings.ReplaceAll(d, "\r", `\r`)
		data[i] = strings.ReplaceAll(d, "\n", `\n`)
	}
	fmt.Fprintf(u.w, "%d,%s,%s,%s\n", time.Now().Unix(), target, typ, strings.Join(data, ","))
}

// Machine is ui.Machine: only the machine-readable UI prints it.
func (u *ui) Machine(target, typ string, data ...string) {
	if u.machine {
		u.line(target, typ, data...)
	}
}

// top is c.Ui in command/build.go: neither colored nor targeted.
func (u *ui) top(kind, msg string) {
	if u.machine {
		u.line("", "ui", kind, msg)
		return
	}
	fmt.Fprintln(u.w, msg)
}

// build is the build's ColoredUi; prefix is TargetedUI's ("" for none).
func (u *ui) build(kind, name, msg string, targeted bool) {
	if targeted {
		arrow := "==>"
		if kind == "message" {
			arrow = "   "
		}
		var lines []string
		for _, l := range strings.Split(msg, "\n") {
			lines = append(lines, fmt.Sprintf("%s %s: %s", arrow, name, l))
		}
		msg = strings.TrimRight(strings.Join(lines, "\n"), " \t\n")
	}
	if u.machine {
		u.line("", "ui", kind, msg)
		return
	}
	if u.color {
		switch kind {
		case "say":
			msg = "\033[1;32m" + msg + "\033[0m"
		case "message":
			msg = "\033[0;32m" + msg + "\033[0m"
		case "error":
			msg = "\033[1;31m" + msg + "\033[0m"
		}
	}
	fmt.Fprintln(u.w, msg)
}

// Main runs the stand-in as the command named by argv[0]: packer, or
// ansible and ansible-galaxy for image-builder's hack/ensure-ansible.sh.
func Main(argv []string) int {
	switch filepath.Base(argv[0]) {
	case "ansible":
		// ansible-core's `ansible --version`, at the version image-builder's
		// hack/ensure-ansible.sh asks for (hack/utils.sh, run from
		// images/capi).
		fmt.Printf("ansible [core %s]\n  config file = None\n", ansibleCorePin())
		return 0
	case "ansible-galaxy":
		// What ansible-galaxy prints when the collections are installed;
		// the real one would otherwise reach Ansible Galaxy.
		fmt.Println("Starting galaxy collection install process\nNothing to do. All requested collections are already installed. If you want to reinstall them, consider using `--force`.")
		return 0
	case "ansible-playbook":
		// Only the Packer ansible provisioner runs playbooks, inside the
		// build the stand-in packer replaces.
		return 0
	}
	args := argv[1:]
	machine := false
	for i, a := range args {
		if a == "-machine-readable" {
			machine = true
			args = append(args[:i:i], args[i+1:]...)
			break
		}
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "stand-in packer: no command")
		return 1
	}
	switch args[0] {
	case "version":
		pins, err := versions.Get()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("Packer v" + strings.TrimPrefix(pins.Packer, "v"))
		return 0
	case "init":
		// The plugins are taken as installed; packer init then prints
		// nothing.
		return 0
	case "build":
		return build(args[1:], machine)
	}
	fmt.Fprintf(os.Stderr, "stand-in packer: %q is not implemented\n", args[0])
	return 1
}

var ansiblePinRe = regexp.MustCompile(`(?m)^_version_ansible_core="([^"]+)"`)

// ansibleCorePin is _version_ansible_core from hack/utils.sh in the
// working folder (images/capi), or "unknown".
func ansibleCorePin() string {
	data, _ := os.ReadFile(filepath.Join("hack", "utils.sh"))
	if m := ansiblePinRe.FindSubmatch(data); m != nil {
		return string(m[1])
	}
	return "unknown"
}

var (
	userRe = regexp.MustCompile("\\{\\{\\s*user `([^`]+)`\\s*\\}\\}")
	envRe  = regexp.MustCompile("\\{\\{\\s*env `([^`]+)`\\s*\\}\\}")
)

func build(args []string, machine bool) int {
	u := &ui{machine: machine, color: true, w: os.Stdout}
	var files []string
	var template string
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "-var-file="):
			files = append(files, strings.TrimPrefix(a, "-var-file="))
		case strings.HasPrefix(a, "-color="):
			u.color = a == "-color=true"
		case strings.HasPrefix(a, "-"):
			fmt.Fprintf(os.Stderr, "stand-in packer: flag %q is not implemented\n", a)
			return 1
		default:
			template = a
		}
	}
	if pid := os.Getenv("STANDIN_PID_FILE"); pid != "" {
		_ = os.WriteFile(pid, []byte(strconv.Itoa(os.Getpid())), 0o600)
	}
	if cp := os.Getenv("STANDIN_VARS_COPY"); cp != "" && len(files) > 0 {
		if data, err := os.ReadFile(files[len(files)-1]); err == nil {
			_ = os.WriteFile(cp, data, 0o600)
		}
	}
	builder, err := load(template, files)
	if err != nil {
		u.top("error", err.Error())
		return 1
	}
	// A legacy JSON builder without "name" is named after its type
	// (image-builder's qemu template has none: "qemu").
	name := builder["name"]
	if name == "" {
		name = builder["type"]
	}
	var run func(context.Context, *ui, string, map[string]string) (artifact, error)
	switch builder["type"] {
	case "proxmox-iso":
		run = proxmoxISO
	case "qemu":
		run = qemu
		if err := qemuPrepare(builder); err != nil {
			// packer/core.go GetBuilds: a failed Prepare is the
			// diagnostic "Failed to prepare build: NAME", its detail
			// the builder's multierror, and packer exits 1.
			u.top("error", fmt.Sprintf("Error: Failed to prepare build: %q\n\n1 error occurred:\n\t* %s\n\n", name, err))
			return 1
		}
	default:
		u.top("error", fmt.Sprintf("stand-in packer: builder type %q is not implemented", builder["type"]))
		return 1
	}
	if u.color && !machine {
		u.build("say", name, name+": output will be in this color.", false)
		u.top("say", "")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	art, err := run(ctx, u, name, builder)
	took := time.Since(start).Round(time.Second)
	if ctx.Err() != nil {
		u.build("error", name, fmt.Sprintf("Build '%s' errored after %s: build was cancelled", name, took), false)
		u.top("say", fmt.Sprintf("\n==> Wait completed after %s", took))
		u.top("say", "Cleanly cancelled builds after being interrupted.")
		return 1
	}
	if err != nil {
		u.build("error", name, fmt.Sprintf("Build '%s' errored after %s: %s", name, took, err), false)
		u.top("say", fmt.Sprintf("\n==> Wait completed after %s", took))
		u.Machine("", "error-count", "1")
		u.top("error", "\n==> Some builds didn't complete successfully and had errors:")
		u.Machine(name, "error", err.Error())
		u.top("error", fmt.Sprintf("--> %s: %s", name, err))
		u.top("say", "\n==> Builds finished but no artifacts were created.")
		return 1
	}
	// Every post-processor sequence of the template is one shell-local,
	// which returns its input and keeps it (packer/build.go CoreBuild.Run):
	// the builder's artifact, then once per sequence.
	pps := atoiOr(builder["post-processors"], 0)
	for _, pp := range strings.Split(builder["post-processor-names"], ",") {
		if pp != "" {
			u.build("say", name, "Running post-processor: "+pp+" (type shell-local)", true)
		}
	}
	u.build("say", name, fmt.Sprintf("Build '%s' finished after %s.", name, took), false)
	u.top("say", fmt.Sprintf("\n==> Wait completed after %s", took))
	u.top("say", "\n==> Builds finished. The artifacts of successful builds are:")
	u.Machine(name, "artifact-count", strconv.Itoa(pps+1))
	for i := range pps + 1 {
		is := strconv.Itoa(i)
		u.Machine(name, "artifact", is, "builder-id", art.builderID)
		u.Machine(name, "artifact", is, "id", art.id)
		u.Machine(name, "artifact", is, "string", art.text)
		u.Machine(name, "artifact", is, "files-count", strconv.Itoa(len(art.files)))
		for j, f := range art.files {
			u.Machine(name, "artifact", is, "file", strconv.Itoa(j), f)
		}
		u.Machine(name, "artifact", is, "end")
		u.top("say", fmt.Sprintf("--> %s: %s", name, art.text))
	}
	return 0
}

// artifact is what a builder hands packer: packersdk.Artifact's
// BuilderId, Id, String and Files.
type artifact struct {
	builderID, id, text string
	files               []string
}

func atoiOr(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}

// load reads a legacy JSON template's variables and its one builder, sets
// the variables from the var files in order (later files win, as in
// packer), and returns the builder's settings with {{user}} and {{env}}
// resolved (disks[0] and network_adapters[0] as disk.* and net.*).
func load(template string, files []string) (map[string]string, error) {
	var tpl struct {
		Builders       []map[string]any `json:"builders"`
		PostProcessors []map[string]any `json:"post-processors"`
		Variables      map[string]any   `json:"variables"`
	}
	data, err := os.ReadFile(template)
	if err != nil {
		return nil, fmt.Errorf("Failed to parse template: %w", err)
	}
	if err := json.Unmarshal(data, &tpl); err != nil || len(tpl.Builders) != 1 {
		return nil, fmt.Errorf("Failed to parse template %s: %v", template, err)
	}
	vars := map[string]string{}
	for k, v := range tpl.Variables {
		if s, ok := v.(string); ok {
			vars[k] = s
		}
	}
	for _, f := range files {
		var m map[string]any
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("Error reading variable file %s: %w", f, err)
		}
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("Error parsing variable file %s: %w", f, err)
		}
		for k, v := range m {
			vars[k] = fmt.Sprint(v)
		}
	}
	var expand func(s string, depth int) string
	expand = func(s string, depth int) string {
		if depth > 8 {
			return s
		}
		s = envRe.ReplaceAllStringFunc(s, func(m string) string { return os.Getenv(envRe.FindStringSubmatch(m)[1]) })
		return userRe.ReplaceAllStringFunc(s, func(m string) string { return expand(vars[userRe.FindStringSubmatch(m)[1]], depth+1) })
	}
	builder := map[string]string{}
	for k, v := range tpl.Builders[0] {
		switch x := v.(type) {
		case string:
			builder[k] = expand(x, 0)
		case bool:
			builder[k] = strconv.FormatBool(x)
		}
	}
	var pps []string
	for _, pp := range tpl.PostProcessors {
		n, _ := pp["name"].(string)
		pps = append(pps, n)
	}
	builder["post-processors"] = strconv.Itoa(len(pps))
	builder["post-processor-names"] = strings.Join(pps, ",")
	if disks, ok := tpl.Builders[0]["disks"].([]any); ok && len(disks) > 0 {
		if d, ok := disks[0].(map[string]any); ok {
			for k, v := range d {
				if s, ok := v.(string); ok {
					builder["disk."+k] = expand(s, 0)
				}
			}
		}
	}
	if nets, ok := tpl.Builders[0]["network_adapters"].([]any); ok && len(nets) > 0 {
		if d, ok := nets[0].(map[string]any); ok {
			for k, v := range d {
				if s, ok := v.(string); ok {
					builder["net."+k] = expand(s, 0)
				}
			}
		}
	}
	return builder, nil
}

// pve is the little of the Proxmox API the proxmox-iso builder uses here,
// with the token header packer-plugin-proxmox sends. TLS is not verified:
// image-builder's template sets insecure_skip_tls_verify.
type pve struct {
	base, auth string
	hc         *http.Client
}

func (p *pve) do(ctx context.Context, method, path string, form url.Values, out any) error {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", p.auth)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%d %s", resp.StatusCode, bytes.TrimSpace(data))
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return err
	}
	if out != nil {
		return json.Unmarshal(env.Data, out)
	}
	return nil
}

// run starts a task with a request and waits for it.
func (p *pve) run(ctx context.Context, method, path string, form url.Values) error {
	var upid string
	if err := p.do(ctx, method, path, form, &upid); err != nil {
		return err
	}
	return p.task(ctx, strings.Split(path, "/")[2], upid)
}

// task waits for a task and returns its error exit status.
func (p *pve) task(ctx context.Context, node, upid string) error {
	for {
		var st struct {
			Status     string `json:"status"`
			ExitStatus string `json:"exitstatus"`
		}
		if err := p.do(ctx, http.MethodGet, "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/status", nil, &st); err != nil {
			return err
		}
		if st.Status == "stopped" {
			if st.ExitStatus != "OK" {
				return errors.New(st.ExitStatus)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// proxmoxISO makes the template as packer-plugin-proxmox's proxmox-iso
// builder does, seen from the API: a VMID from /cluster/nextid unless
// vm_id is set, the VM created with the builder's disk (storage_pool,
// disk_size, format) and network, started, provisioned (not here: no VM
// boots), stopped and converted to a template named template_name. A
// cancelled build deletes the VM (the builder's cleanup). STANDIN_MODE=hang
// waits for a signal before the VM is provisioned.
func proxmoxISO(ctx context.Context, u *ui, name string, b map[string]string) (artifact, error) {
	id, err := proxmoxTemplate(ctx, u, name, b)
	if err != nil {
		return artifact{}, err
	}
	return artifact{builderID: "proxmox.iso", id: strconv.Itoa(id), text: fmt.Sprintf("A template was created: %d", id)}, nil
}

func proxmoxTemplate(ctx context.Context, u *ui, name string, b map[string]string) (int, error) {
	say := func(format string, args ...any) { u.build("say", name, fmt.Sprintf(format, args...), true) }
	// The template passes no credentials: the plugin falls back to
	// PROXMOX_URL, PROXMOX_USERNAME and PROXMOX_TOKEN
	// (builder/proxmox/common/config.go Prepare).
	url0, user, token := os.Getenv("PROXMOX_URL"), os.Getenv("PROXMOX_USERNAME"), os.Getenv("PROXMOX_TOKEN")
	p := &pve{base: strings.TrimSuffix(url0, "/"), auth: "PVEAPIToken=" + user + "=" + token,
		hc: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: b["insecure_skip_tls_verify"] == "true"}}}}
	node := b["node"]
	id, _ := strconv.Atoi(b["vm_id"])
	if id == 0 {
		var next json.Number
		if err := p.do(ctx, http.MethodGet, "/cluster/nextid", nil, &next); err != nil {
			return 0, fmt.Errorf("error getting next free VMID: %w", err)
		}
		n, _ := next.Int64()
		id = int(n)
	}
	say("Creating VM")
	// A leak no real build should have, on purpose: labctl must scrub the
	// token from whatever packer prints.
	u.build("message", name, fmt.Sprintf("Connecting to %s as %s (token %s)", url0, user, token), true)
	size := strings.TrimSuffix(strings.TrimSuffix(b["disk.disk_size"], "G"), "g")
	net := "virtio,bridge=" + b["net.bridge"]
	if t := b["net.vlan_tag"]; t != "" {
		net += ",tag=" + t
	}
	form := url.Values{"vmid": {strconv.Itoa(id)}, "name": {b["template_name"]}, "memory": {b["memory"]}, "cores": {b["cores"]},
		"sockets": {b["sockets"]}, "scsihw": {b["scsi_controller"]}, "net0": {net},
		"scsi0": {fmt.Sprintf("%s:%s,format=%s", b["disk.storage_pool"], size, b["disk.format"])}}
	vm := fmt.Sprintf("/nodes/%s/qemu/%d", node, id)
	if err := p.run(ctx, http.MethodPost, "/nodes/"+node+"/qemu", form); err != nil {
		return 0, fmt.Errorf("error creating VM: %w", err)
	}
	cleanup := func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.run(c, http.MethodPost, vm+"/status/stop", url.Values{})
		_ = p.run(c, http.MethodDelete, vm, nil)
	}
	if err := p.run(ctx, http.MethodPost, vm+"/status/start", url.Values{}); err != nil {
		cleanup()
		return 0, fmt.Errorf("error starting VM: %w", err)
	}
	say("Waiting for SSH to become available...")
	if os.Getenv("STANDIN_MODE") == "hang" {
		<-ctx.Done()
		cleanup()
		return 0, ctx.Err()
	}
	say("Connected to SSH!")
	say("Provisioning with Ansible...")
	say("Stopping VM")
	if err := p.run(ctx, http.MethodPost, vm+"/status/stop", url.Values{}); err != nil {
		cleanup()
		return 0, fmt.Errorf("error stopping VM: %w", err)
	}
	say("Converting VM to template")
	if err := p.run(ctx, http.MethodPost, vm+"/template", url.Values{}); err != nil {
		cleanup()
		return 0, fmt.Errorf("error converting VM to template: %w", err)
	}
	return id, nil
}
