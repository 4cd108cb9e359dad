// Package pvetest is a strict, in-memory Proxmox VE API server for tests.
//
// Every request is checked against the real PVE API schema (apidoc.json in
// ../shared/pve): a path, method, parameter name, type or enum value that a
// real PVE 9 would reject fails the test. On top of the schema it enforces
// the rules labctl learned the hard way (see ../shared/LAB.md): a running VM
// cannot be deleted, VMIDs collide, import-from needs ":0" and an import or
// images volume, uploads take only iso, vztmpl and import, and the
// Authorization header must be "PVEAPIToken=user@realm!id=secret".
//
// Tasks are asynchronous: "running" until their delay passes, then
// "stopped" with OK or an injected failure. Faults (500s, hung requests,
// failed tasks, VMID collisions) are injected per path template.
package pvetest

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is the fake PVE API. Lock-free accessors are not offered: tests
// read state through the methods below.
type Server struct {
	*httptest.Server
	t      testing.TB
	schema *Schema

	TokenID string
	Secret  string

	mu         sync.Mutex
	nodes      map[string]*Node
	vms        map[int]*VM
	tasks      map[string]*Task
	remote     map[string][]byte // URL → body, what download-url can fetch
	privileges map[string][]string
	taskDelay  time.Duration
	agentDelay time.Duration
	noAgent    bool
	faults     []*fault
	collide    int
	log        []Request
	violations []string
	seq        int
	// KubeconfigFor answers guest-agent file-read of a VM; nil serves only
	// files set with SetGuestFile.
	fileHook func(vm *VM, path string) ([]byte, bool)
	onReq    func(Request)
	addr     string
	addrHook func(vm *VM) (string, bool)
	cert     *tls.Certificate
	power    *powerQueue
	execHook func(vm VM, argv []string) (GuestExec, bool)
	execs    map[string]GuestExec // "vmid/pid" -> result
}

// ArraySep keeps an array parameter's items apart in the string the
// schema check and handlers see.
const ArraySep = "\x00"

// OnGuestAddress overrides the IPv4 address (a.b.c.d/n) the guest agent
// reports for a VM; by default it is the one in ipconfig0. Tests that go
// on to talk to the VM use a loopback address here.
func (s *Server) OnGuestAddress(f func(vm *VM) (string, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addrHook = f
}

// Node is a PVE node.
type Node struct {
	Name      string
	MemoryMiB int
	CPUs      int
	Bridges   []string
	Storages  map[string]*Storage
}

// Storage is a node's storage with the content types it accepts.
type Storage struct {
	Name    string
	Type    string
	Content []string
	Volumes map[string]*Volume
}

// Volume is one item of storage content.
type Volume struct {
	VolID   string
	Content string
	Format  string
	Size    int64
	VMID    int
	Data    []byte
}

// VM is a QEMU VM.
type VM struct {
	ID        int
	Node      string
	Config    map[string]string
	Running   bool
	Lock      string
	agentUpAt time.Time
	Files     map[string][]byte
}

// Name is the VM's configured name.
func (v *VM) Name() string { return v.Config["name"] }

// Tags are the VM's tags.
func (v *VM) Tags() []string {
	return strings.FieldsFunc(v.Config["tags"], func(r rune) bool { return r == ';' || r == ',' })
}

// Task is an asynchronous PVE task.
type Task struct {
	UPID, Node, Type, ID string
	start                time.Time
	due                  time.Time
	exit                 string
	Log                  []string
	effect               func() error
	done                 bool
}

// Request is one request the server answered.
type Request struct {
	Method string
	Path   string // schema template, e.g. /nodes/{node}/qemu
	Raw    string
	Status int
}

// Write reports whether the request changes state.
func (r Request) Write() bool { return r.Method != http.MethodGet }

type fault struct {
	method, tmpl string
	times        int
	status       int
	hang         bool
	taskExit     string // fail the task the request starts
}

// Option configures New.
type Option func(*Server)

// WithAddr listens on addr (default 127.0.0.1:0), e.g. 127.0.0.2:0 when a
// test puts the management VM at 127.0.0.1. Loopback only.
func WithAddr(addr string) Option { return func(s *Server) { s.addr = addr } }

// WithCertificate serves this certificate instead of httptest's built-in
// one (which names only 127.0.0.1 and ::1): for a client that verifies
// the server against a test CA of its own, at an address such as
// 127.77.0.8.
func WithCertificate(c tls.Certificate) Option { return func(s *Server) { s.cert = &c } }

// WithTaskDelay sets how long tasks stay running (default 30 ms).
func WithTaskDelay(d time.Duration) Option { return func(s *Server) { s.taskDelay = d } }

// WithAgentDelay sets how long after start a VM's guest agent answers
// (default 50 ms).
func WithAgentDelay(d time.Duration) Option { return func(s *Server) { s.agentDelay = d } }

// WithoutGuestAgent makes every VM one whose guest has no qemu-guest-agent,
// as a VM from the Ubuntu 24.04 cloud image: the agent endpoints answer
// HTTP 500 "QEMU guest agent is not running" however long the VM runs.
// That is PVE's answer: qemu-server's PVE/QemuServer/Agent.pm
// agent_available() dies with that text when the agent's socket does not
// answer guest-ping, and the API server turns the die into status 500.
func WithoutGuestAgent() Option { return func(s *Server) { s.noAgent = true } }

// New starts a TLS server with one node, pv1-1, as in the owner's lab:
// 29.16 GiB, bridge vmbr0, storages local (iso, vztmpl, import, snippets,
// backup) and local-lvm (images, rootdir). The token is root@pam!labctl with
// every privilege on /.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{
		t:          t,
		schema:     MustLoadSchema(t),
		TokenID:    "root@pam!labctl",
		Secret:     "5e1f0d2c-pvetest-secret-3a9b",
		nodes:      map[string]*Node{},
		vms:        map[int]*VM{},
		tasks:      map[string]*Task{},
		remote:     map[string][]byte{},
		privileges: map[string][]string{"/": AllPrivileges()},
		taskDelay:  30 * time.Millisecond,
		agentDelay: 50 * time.Millisecond,
	}
	for _, o := range opts {
		o(s)
	}
	s.AddNode("pv1-1", 29860, 8, "vmbr0")
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if s.addr != "" {
		l, err := net.Listen("tcp", s.addr)
		if err != nil {
			t.Fatalf("pvetest: listening on %s: %v", s.addr, err)
		}
		s.Listener.Close()
		s.Listener = l
	}
	// TLS tests make failed handshakes on purpose; keep them out of the log.
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	if s.cert != nil {
		s.TLS = &tls.Config{Certificates: []tls.Certificate{*s.cert}}
	}
	s.StartTLS()
	t.Cleanup(func() {
		s.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, v := range s.violations {
			t.Errorf("pvetest: a real PVE would reject this request: %s", v)
		}
	})
	return s
}

// AllPrivileges is every privilege labctl's doctor may ask about.
func AllPrivileges() []string {
	return []string{"Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit",
		"Pool.Audit", "SDN.Use", "Sys.Audit", "Sys.AccessNetwork", "Sys.Modify", "VM.Allocate", "VM.Audit", "VM.Clone",
		"VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Cloudinit", "VM.Config.Disk", "VM.Config.HWType",
		"VM.Config.Memory", "VM.Config.Network", "VM.Config.Options", "VM.GuestAgent.Audit", "VM.GuestAgent.FileRead",
		"VM.Migrate", "VM.PowerMgmt"}
}

// AddNode adds a node with storages local and local-lvm and the bridges.
func (s *Server) AddNode(name string, memoryMiB, cpus int, bridges ...string) *Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := &Node{Name: name, MemoryMiB: memoryMiB, CPUs: cpus, Bridges: bridges, Storages: map[string]*Storage{
		"local":     {Name: "local", Type: "dir", Content: []string{"backup", "import", "iso", "snippets", "vztmpl"}, Volumes: map[string]*Volume{}},
		"local-lvm": {Name: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}, Volumes: map[string]*Volume{}},
	}}
	s.nodes[name] = n
	return n
}

// SetStorageContent replaces the content types a storage accepts.
func (s *Server) SetStorageContent(node, storage string, content ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.nodes[node].Storages[storage]
	if st == nil {
		st = &Storage{Name: storage, Type: "dir", Volumes: map[string]*Volume{}}
		s.nodes[node].Storages[storage] = st
	}
	st.Content = content
}

// AddStorage adds (or replaces) a storage of a PVE storage type (dir,
// lvmthin, zfspool, ...) on node, accepting the content types.
func (s *Server) AddStorage(node, storage, typ string, content ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[node].Storages[storage] = &Storage{Name: storage, Type: typ, Content: content, Volumes: map[string]*Volume{}}
}

// AddVolume puts a volume on a node's storage, as a VM or an upload
// would have left it: content iso or images, owned by vmid (0: none).
func (s *Server) AddVolume(node, storage, volid, content string, vmid int, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	format := "raw"
	if content == "iso" {
		format = "iso"
	}
	s.nodes[node].Storages[storage].Volumes[volid] = &Volume{VolID: volid, Content: content, Format: format, Size: size, VMID: vmid}
}

// ServeURL makes download-url able to fetch body from url.
func (s *Server) ServeURL(u string, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remote[u] = body
}

// SetPrivileges replaces the token's privileges on path.
func (s *Server) SetPrivileges(path string, privs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if privs == nil {
		delete(s.privileges, path)
		return
	}
	s.privileges[path] = privs
}

// AddVM adds a VM made outside labctl. memoryMiB 0 means 512.
func (s *Server) AddVM(node string, id int, name string, memoryMiB int, running, template bool, tags ...string) *VM {
	s.mu.Lock()
	defer s.mu.Unlock()
	if memoryMiB == 0 {
		memoryMiB = 512
	}
	v := &VM{ID: id, Node: node, Running: running, Files: map[string][]byte{}, Config: map[string]string{
		"name": name, "memory": strconv.Itoa(memoryMiB), "cores": "1",
	}}
	if template {
		v.Config["template"] = "1"
	}
	if len(tags) > 0 {
		v.Config["tags"] = strings.Join(tags, ";")
	}
	s.vms[id] = v
	return v
}

// OnFileRead answers guest-agent file-read for files not set on the VM.
func (s *Server) OnFileRead(f func(vm *VM, path string) ([]byte, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fileHook = f
}

// VMs returns copies of the VMs, by VMID.
func (s *Server) VMs() []VM {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick()
	out := make([]VM, 0, len(s.vms))
	for _, v := range s.vms {
		c := *v
		c.Config = map[string]string{}
		for k, x := range v.Config {
			c.Config[k] = x
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Volumes lists the volids on a node's storage.
func (s *Server) Volumes(node, storage string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id := range s.nodes[node].Storages[storage].Volumes {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Volume returns a volume's bytes.
func (s *Server) Volume(node, storage, volid string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.nodes[node].Storages[storage].Volumes[volid]
	if !ok {
		return nil, false
	}
	return v.Data, true
}

// Requests returns every request answered so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

// ResetRequests forgets the request log.
func (s *Server) ResetRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
}

// Writes counts the requests that change state.
func (s *Server) Writes() int {
	n := 0
	for _, r := range s.Requests() {
		if r.Write() {
			n++
		}
	}
	return n
}

// TakeViolations returns and clears the schema violations, for tests that
// send bad requests on purpose.
func (s *Server) TakeViolations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.violations
	s.violations = nil
	return v
}

// FailRequests makes the next n requests matching method and path template
// answer with status (e.g. 500).
func (s *Server) FailRequests(method, tmpl string, n, status int) {
	s.addFault(&fault{method: method, tmpl: tmpl, times: n, status: status})
}

// HangRequests makes the next n matching requests hang until the client
// gives up (a request timeout).
func (s *Server) HangRequests(method, tmpl string, n int) {
	s.addFault(&fault{method: method, tmpl: tmpl, times: n, hang: true})
}

// FailTasks makes the tasks started by the next n matching requests end
// with exit status exit and leave no effect.
func (s *Server) FailTasks(method, tmpl string, n int, exit string) {
	s.addFault(&fault{method: method, tmpl: tmpl, times: n, taskExit: exit})
}

// ClearFaults drops every fault injected and not yet used up: the
// cause is fixed.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// CollideVMIDs makes the next n VM creates lose a race: just before each,
// another client creates a VM with the same VMID.
func (s *Server) CollideVMIDs(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.collide = n
}

func (s *Server) addFault(f *fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
}

func (s *Server) takeFault(method, tmpl string, pred func(*fault) bool) *fault {
	for _, f := range s.faults {
		if f.times > 0 && f.method == method && f.tmpl == tmpl && pred(f) {
			f.times--
			return f
		}
	}
	return nil
}

var tokenHeader = regexp.MustCompile(`^PVEAPIToken=([^\s:/]+@[A-Za-z][A-Za-z0-9.\-_]+![A-Za-z][A-Za-z0-9.\-_]+)=(\S+)$`)

// apiErr is an error answer: status, message and per-parameter errors.
type apiErr struct {
	status int
	msg    string
	errs   map[string]string
}

func (e *apiErr) Error() string { return e.msg }

func fail(status int, format string, args ...any) *apiErr {
	return &apiErr{status: status, msg: fmt.Sprintf(format, args...)}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	// Match on the escaped path: a volume id in a segment may hold %2F.
	path := strings.TrimPrefix(r.URL.EscapedPath(), "/api2/json")
	rec := Request{Method: r.Method, Path: path, Raw: r.URL.RequestURI()}
	data, err := s.handle(w, r, path, &rec)
	if err != nil {
		var e *apiErr
		if ae, ok := err.(*apiErr); ok {
			e = ae
		} else {
			e = fail(500, "%v", err)
		}
		rec.Status = e.status
		s.record(rec)
		body := map[string]any{"data": nil, "message": e.msg + "\n"}
		if e.errs != nil {
			body["errors"] = e.errs
		}
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		w.WriteHeader(e.status)
		_ = json.NewEncoder(w).Encode(body)
		return
	}
	rec.Status = 200
	s.record(rec)
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	s.log = append(s.log, r)
	hook := s.onReq
	s.mu.Unlock()
	if hook != nil {
		hook(r)
	}
}

// OnRequest calls f after each answered request (e.g. to cancel a client
// mid-way); nil removes it.
func (s *Server) OnRequest(f func(Request)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onReq = f
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request, path string, rec *Request) (any, error) {
	if !strings.HasPrefix(r.URL.Path, "/api2/json/") {
		return nil, fail(404, "not found: PVE serves its API under /api2/json")
	}
	m := tokenHeader.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil {
		return nil, fail(401, "No ticket")
	}
	if m[1] != s.TokenID || m[2] != s.Secret {
		return nil, fail(401, "invalid token value!")
	}
	params, file, err := readParams(r)
	if err != nil {
		return nil, fail(400, "%v", err)
	}
	tmpl, errs := s.schema.Check(r.Method, path, params)
	if tmpl != "" {
		rec.Path = tmpl
	}
	if errs != nil {
		s.mu.Lock()
		s.violations = append(s.violations, fmt.Sprintf("%s %s: %v", r.Method, r.URL.RequestURI(), errs))
		s.mu.Unlock()
		if _, bad := errs["path"]; bad {
			return nil, fail(501, "Method '%s %s' not implemented", r.Method, path)
		}
		if _, bad := errs["method"]; bad {
			return nil, fail(501, "Method '%s %s' not implemented", r.Method, path)
		}
		return nil, &apiErr{status: 400, msg: "Parameter verification failed.", errs: errs}
	}
	_, pp, _ := s.schema.Match(path)
	for k, v := range pp {
		params[k], _ = url.PathUnescape(v)
	}

	s.mu.Lock()
	if f := s.takeFault(r.Method, tmpl, func(f *fault) bool { return f.hang }); f != nil {
		s.mu.Unlock()
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		return nil, fail(504, "hung on purpose")
	}
	if f := s.takeFault(r.Method, tmpl, func(f *fault) bool { return f.status != 0 }); f != nil {
		s.mu.Unlock()
		return nil, fail(f.status, "injected failure")
	}
	var taskExit string
	if f := s.takeFault(r.Method, tmpl, func(f *fault) bool { return f.taskExit != "" }); f != nil {
		taskExit = f.taskExit
	}
	defer s.mu.Unlock()
	s.tick()
	h, ok := routes[r.Method+" "+tmpl]
	if !ok {
		s.violations = append(s.violations, fmt.Sprintf("pvetest does not implement %s %s", r.Method, tmpl))
		return nil, fail(501, "pvetest: %s %s is valid but not implemented here", r.Method, tmpl)
	}
	c := &call{s: s, p: params, file: file, user: m[1], taskExit: taskExit}
	return h(c)
}

// readParams collects query, JSON, form or multipart parameters as strings.
func readParams(r *http.Request) (map[string]string, *upload, error) {
	q, err := flatten(r.URL.Query())
	if err != nil {
		return nil, nil, err
	}
	if r.Method == http.MethodGet || r.Method == http.MethodDelete {
		return q, nil, nil
	}
	if len(q) > 0 {
		return nil, nil, fmt.Errorf("%s parameters belong in the body, not the query", r.Method)
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "", "application/json":
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || len(body) == 0 {
			return map[string]string{}, nil, err
		}
		var raw map[string]any
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.UseNumber()
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, fmt.Errorf("malformed JSON body: %v", err)
		}
		out := map[string]string{}
		for k, v := range raw {
			switch x := v.(type) {
			case string:
				out[k] = x
			case json.Number:
				out[k] = x.String()
			case bool:
				out[k] = map[bool]string{true: "1", false: "0"}[x]
			case nil:
			case []any:
				// An array parameter (agent/exec's command): its items,
				// each a string, kept apart by ArraySep.
				items := make([]string, 0, len(x))
				for _, it := range x {
					str, ok := it.(string)
					if !ok {
						return nil, nil, fmt.Errorf("parameter %s: array item %T is not a string", k, it)
					}
					items = append(items, str)
				}
				out[k] = strings.Join(items, ArraySep)
			default:
				return nil, nil, fmt.Errorf("parameter %s: JSON %T is not a PVE scalar", k, v)
			}
		}
		return out, nil, nil
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return nil, nil, err
		}
		out, err := flatten(r.PostForm)
		return out, nil, err
	case "multipart/form-data":
		if err := r.ParseMultipartForm(64 << 20); err != nil {
			return nil, nil, err
		}
		out, err := flatten(url.Values(r.MultipartForm.Value))
		if err != nil {
			return nil, nil, err
		}
		fhs := r.MultipartForm.File["filename"]
		if len(fhs) != 1 {
			return nil, nil, fmt.Errorf("upload needs exactly one file part named filename")
		}
		f, err := fhs[0].Open()
		if err != nil {
			return nil, nil, err
		}
		defer f.Close()
		data, err := io.ReadAll(f)
		if err != nil {
			return nil, nil, err
		}
		// The real handler turns the file part into filename (and tmpfilename).
		out["filename"] = fhs[0].Filename
		return out, &upload{name: fhs[0].Filename, data: data}, nil
	}
	return nil, nil, fmt.Errorf("unsupported content type %q", ct)
}

type upload struct {
	name string
	data []byte
}

// tick finishes tasks whose time has come. Callers hold s.mu.
func (s *Server) tick() {
	now := time.Now()
	ids := make([]string, 0, len(s.tasks))
	for id := range s.tasks {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return s.tasks[ids[i]].start.Before(s.tasks[ids[j]].start) })
	for _, id := range ids {
		t := s.tasks[id]
		if t.done || now.Before(t.due) {
			continue
		}
		t.done = true
		if t.exit == "" && t.effect != nil {
			if err := t.effect(); err != nil {
				t.exit = err.Error()
				t.Log = append(t.Log, "TASK ERROR: "+err.Error())
			}
		}
		if t.exit == "" {
			t.exit = "OK"
			t.Log = append(t.Log, "TASK OK")
		}
	}
}

// startTask registers a task whose effect runs when it finishes.
func (c *call) startTask(node, typ, id string, log []string, effect func() error) string {
	s := c.s
	s.seq++
	now := time.Now()
	upid := fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", node, 4000+s.seq, 100000+s.seq, now.Unix(), typ, id, c.user)
	t := &Task{UPID: upid, Node: node, Type: typ, ID: id, start: now, due: now.Add(s.taskDelay), Log: log, effect: effect}
	if c.taskExit != "" {
		t.exit = c.taskExit
		t.Log = append(t.Log, "TASK ERROR: "+c.taskExit)
	}
	s.tasks[upid] = t
	return upid
}

// DigestOf is a config digest, as PVE returns with a config.
func DigestOf(cfg map[string]string) string {
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%s\n", k, cfg[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:40]
}
