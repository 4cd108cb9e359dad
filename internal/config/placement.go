package config

import (
	"errors"
	"fmt"
	"strings"
)

// AllowedNodes are the Proxmox nodes cluster c's machines may go to: its
// allowedNodes, else every node of its hypervisor (CAPMOX then places
// machines on any of them). Nil when c's hypervisor is not Proxmox.
// Validation, the render and doctor all read it here.
func (l *Lab) AllowedNodes(c *Cluster) []string {
	h, err := l.Hypervisor(c.Hypervisor)
	if err != nil || h.Proxmox == nil {
		return nil
	}
	if len(c.AllowedNodes) > 0 {
		return c.AllowedNodes
	}
	return nodeNames(h.Proxmox)
}

// NodeMismatch is two allowed nodes of a cluster that differ in bridge or
// storage: the cluster's machine templates name one of each.
type NodeMismatch struct {
	First, Other PVENode
	// Whose names the list: "its allowedNodes", or the hypervisor's
	// nodes when the cluster sets none.
	Whose string
}

func (e *NodeMismatch) Error() string {
	return fmt.Sprintf("%s differ in bridge or storage: %s has %s/%s, %s has %s/%s; the cluster's machine templates name one of each, so list in allowedNodes only nodes that share both",
		e.Whose, e.First.Name, e.First.Bridge, e.First.Storage, e.Other.Name, e.Other.Bridge, e.Other.Storage)
}

// ClusterNode is the node whose bridge and storage cluster c's machine
// templates name: the first of its allowed nodes, which must all share
// them (a *NodeMismatch when they do not). Names that are no node of the
// hypervisor are passed over.
func (l *Lab) ClusterNode(c *Cluster) (PVENode, error) {
	h, err := l.Hypervisor(c.Hypervisor)
	if err != nil {
		return PVENode{}, err
	}
	if h.Proxmox == nil {
		return PVENode{}, fmt.Errorf("hypervisor %s is not a Proxmox hypervisor", h.Name)
	}
	nodes := l.AllowedNodes(c)
	whose := "its allowedNodes"
	if len(c.AllowedNodes) == 0 {
		whose = "the nodes of hypervisor " + h.Name + " (it sets no allowedNodes)"
	}
	var first *PVENode
	for _, name := range nodes {
		n := h.node(name)
		switch {
		case n == nil:
		case first == nil:
			first = n
		case n.Bridge != first.Bridge || n.Storage != first.Storage:
			return PVENode{}, &NodeMismatch{First: *first, Other: *n, Whose: whose}
		}
	}
	if first == nil {
		return PVENode{}, fmt.Errorf("none of its allowed nodes (%s) is a node of hypervisor %s", strings.Join(nodes, ", "), h.Name)
	}
	return *first, nil
}

// node is the Proxmox node called name, the first one of that name.
func (h *Hypervisor) node(name string) *PVENode {
	for i := range h.Proxmox.Nodes {
		if h.Proxmox.Nodes[i].Name == name {
			return &h.Proxmox.Nodes[i]
		}
	}
	return nil
}

// isNodeMismatch reports whether err is a *NodeMismatch.
func isNodeMismatch(err error) bool {
	var m *NodeMismatch
	return errors.As(err, &m)
}
