#!/usr/bin/env bash
# Starts libvirt by hand for the real-VM tests: virtlogd and libvirtd
# (there is no systemd here), and records what it started and the host's
# ip_forward, so host-down.sh restores the machine exactly.
#
# Several checkouts on one machine may run their tests at once, and there
# is one libvirtd per machine. So each run registers as a user of the test
# bed (LABCTL_TESTBED_OWNER, default: the caller's PID), daemons already
# running are shared, and host-down.sh stops them only when the last live
# user leaves. The real-VM tests themselves take turns through a lock
# (/run/lock/labctl-libvirt-vms.lock), because their network must be
# 10.213.0.0/24 and there can be only one such network.
#
# libvirtd runs under "tini -s", a subreaper: the init process here does
# not reap orphans, so the qemu processes libvirt probes and kills would
# stay zombies, and libvirt waits on each zombie (a VM define then seems
# to hang).
set -euo pipefail
state=${LABCTL_TESTBED_STATE:-/run/labctl-libvirt-testbed}
lock=/run/lock/labctl-libvirt-testbed.lock
owner=${LABCTL_TESTBED_OWNER:-$PPID}
[ "$(id -u)" = 0 ] || { echo "host-up: must run as root" >&2; exit 1; }
if [ -z "${LABCTL_TESTBED_LOCKED:-}" ]; then
	# One host-up or host-down at a time; -o keeps the lock out of the daemons.
	LABCTL_TESTBED_LOCKED=1 LABCTL_TESTBED_OWNER=$owner exec flock -o "$lock" "$0" "$@"
fi
for tool in libvirtd virtlogd virsh qemu-system-x86_64 iptables tini; do
	command -v "$tool" >/dev/null || { echo "host-up: $tool is missing; apt-get install --no-install-recommends libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 qemu-utils dnsmasq-base iptables tini" >&2; exit 1; }
done
mkdir -p "$state/users"
touch "$state/users/$owner"
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

# libvirtd probes QEMU's capabilities on first use, by running QEMU with a
# QMP monitor. On this busy machine that probe QEMU sometimes stops
# answering, and libvirt waits for it forever, so every define hangs. Probe
# now, under a watchdog: a probe that hangs is killed (by PID, a QEMU that
# libvirtd started for probing) and retried.
tini=$(cat "$state/tini.pid" 2>/dev/null || true)
for try in 1 2 3 4; do
	if timeout 120 virsh -q -c qemu:///system capabilities >/dev/null 2>&1; then
		echo "host-up: QEMU capabilities probed" >&2
		break
	fi
	[ "$try" = 4 ] && { echo "host-up: libvirtd could not probe QEMU's capabilities 4 times; see /var/log/libvirt/labctl-testbed-libvirtd.log" >&2; exit 1; }
	for pid in $(pgrep -f 'qemu-system-x86_64 .*-qmp unix:/var/lib/libvirt/qemu/qmp-' || true); do
		ppid=$(ps -o ppid= -p "$pid" | tr -d ' ')
		if [ -z "$tini" ] || [ "$ppid" = "$tini" ] || [ "$ppid" = 1 ]; then
			echo "host-up: the capabilities probe (QEMU pid $pid) hangs; killing it and probing again" >&2
			kill "$pid" 2>/dev/null || true
		fi
	done
	sleep 2
done
