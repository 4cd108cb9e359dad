package pvetest

import (
	"fmt"
	"strings"
)

func init() {
	routes["POST /nodes/{node}/qemu/{vmid}/agent/exec"] = agentExec
	routes["GET /nodes/{node}/qemu/{vmid}/agent/exec-status"] = agentExecStatus
}

// GuestExec is how a command run by the guest agent ended.
type GuestExec struct {
	ExitCode int
	Out, Err string
}

// OnGuestExec answers the guest agent's exec for a running VM whose
// agent is up: f gets a copy of the VM and the command's argv and says
// how it ended; false means the guest has no such program. It is how a
// VM-boot stand-in answers CAPMOX's `cloud-init status` (pkg/proxmox/
// goproxmox/api_client.go CloudInitStatus, v0.9.0). f runs with the
// server's lock held: it must not call the server.
func (s *Server) OnGuestExec(f func(vm VM, argv []string) (GuestExec, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.execHook = f
}

// agentExec is qemu-server's PVE/API2/Qemu/Agent.pm exec: guest-exec
// starts the command and answers its pid at once; exec-status reports it.
// A program the guest lacks fails guest-exec itself (the agent's
// g_spawn error, which PVE turns into a 500).
func agentExec(c *call) (any, error) {
	v, err := c.agent()
	if err != nil {
		return nil, err
	}
	argv := strings.Split(c.p["command"], ArraySep)
	var res GuestExec
	ok := false
	if c.s.execHook != nil {
		cp := *v
		cp.Config = make(map[string]string, len(v.Config))
		for k, x := range v.Config {
			cp.Config[k] = x
		}
		cp.Files = nil
		res, ok = c.s.execHook(cp, argv)
	}
	if !ok {
		return nil, fail(500, "Agent error: Guest agent command failed, error was 'Failed to execute child process “%s” (No such file or directory)'", argv[0])
	}
	c.s.seq++
	pid := 1000 + c.s.seq
	if c.s.execs == nil {
		c.s.execs = map[string]GuestExec{}
	}
	c.s.execs[fmt.Sprintf("%d/%d", v.ID, pid)] = res
	return map[string]any{"pid": pid}, nil
}

// agentExecStatus answers a finished command (the stand-in's commands end
// at once): exited 1, the exit code and output.
func agentExecStatus(c *call) (any, error) {
	v, err := c.agent()
	if err != nil {
		return nil, err
	}
	res, ok := c.s.execs[fmt.Sprintf("%d/%s", v.ID, c.p["pid"])]
	if !ok {
		return nil, fail(500, "Agent error: Invalid parameter 'pid'")
	}
	out := map[string]any{"exited": 1, "exitcode": res.ExitCode}
	if res.Out != "" {
		out["out-data"] = res.Out
	}
	if res.Err != "" {
		out["err-data"] = res.Err
	}
	return out, nil
}
