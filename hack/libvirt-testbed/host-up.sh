#!/usr/bin/env bash
# Starts libvirt by hand for the real-VM tests: virtlogd and libvirtd
# (there is no systemd here). Records what it started, and the host's
# ip_forward, so host-down.sh restores the machine exactly. Idempotent:
# daemons already running are left alone and not recorded.
#
# libvirtd runs under "tini -s", a subreaper: the init process here does
# not reap orphans, so the qemu processes libvirt probes and kills would
# stay zombies, and libvirt waits on each zombie for ~15 s (a VM define
# then seems to hang).
#
# The tests make their own NAT network (labctl-test, 10.213.0.0/24) through
# labctl's driver and reject any forwarding off its bridge; libvirt's
# "default" network (192.168.122.0/24) is never started.
set -euo pipefail
state=${LABCTL_TESTBED_STATE:-/run/labctl-testbed}
[ "$(id -u)" = 0 ] || { echo "host-up: must run as root" >&2; exit 1; }
for tool in libvirtd virtlogd virsh qemu-system-x86_64 iptables tini; do
	command -v "$tool" >/dev/null || { echo "host-up: $tool is missing; apt-get install --no-install-recommends libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 qemu-utils dnsmasq-base iptables tini" >&2; exit 1; }
done
mkdir -p "$state"
[ -f "$state/ip_forward" ] || cat /proc/sys/net/ipv4/ip_forward >"$state/ip_forward"

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if ! alive /run/virtlogd.pid; then
	virtlogd -d
	for _ in $(seq 50); do alive /run/virtlogd.pid && break; sleep 0.1; done
	cp /run/virtlogd.pid "$state/virtlogd.pid"
	echo "host-up: started virtlogd (pid $(cat /run/virtlogd.pid))" >&2
fi
if ! alive /run/libvirtd.pid; then
	rm -f /run/libvirtd.pid
	setsid tini -s -- libvirtd </dev/null >>/var/log/libvirt/labctl-testbed-libvirtd.log 2>&1 &
	echo $! >"$state/tini.pid"
	for _ in $(seq 100); do alive /run/libvirtd.pid && [ -S /run/libvirt/libvirt-sock ] && break; sleep 0.1; done
	alive /run/libvirtd.pid || { echo "host-up: libvirtd did not start; see /var/log/libvirt/labctl-testbed-libvirtd.log" >&2; exit 1; }
	cp /run/libvirtd.pid "$state/libvirtd.pid"
	echo "host-up: started libvirtd (pid $(cat /run/libvirtd.pid)) under tini (pid $(cat "$state/tini.pid"))" >&2
fi
for _ in $(seq 100); do virsh -c qemu:///system version >/dev/null 2>&1 && break; sleep 0.1; done
virsh -c qemu:///system version >&2
