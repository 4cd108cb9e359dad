#!/usr/bin/env bash
# Undoes host-up.sh for one user of the test bed (LABCTL_TESTBED_OWNER,
# default: the caller's PID). When no other live user is left, it also
# removes what tests left behind (sweep.sh), stops by PID only the
# daemons host-up.sh started, removes libvirt's empty LIBVIRT_* chains and
# restores ip_forward. Safe to run any number of times.
set -uo pipefail
state=${LABCTL_TESTBED_STATE:-/run/labctl-libvirt-testbed}
lock=/run/lock/labctl-libvirt-testbed.lock
owner=${LABCTL_TESTBED_OWNER:-$PPID}
if [ -z "${LABCTL_TESTBED_LOCKED:-}" ]; then
	LABCTL_TESTBED_LOCKED=1 LABCTL_TESTBED_OWNER=$owner exec flock -o "$lock" "$0" "$@"
fi

rm -f "$state/users/$owner"
others=()
for u in "$state"/users/*; do
	[ -e "$u" ] || continue
	if kill -0 "$(basename "$u")" 2>/dev/null; then others+=("$(basename "$u")"); else rm -f "$u"; fi
done
if [ ${#others[@]} -gt 0 ]; then
	echo "host-down: libvirt stays up for the other test runs on this machine (pids ${others[*]})" >&2
	exit 0
fi

"$(dirname "$0")/sweep.sh" | sed 's/^/host-down: /' >&2

stop() { # name: kill the daemon host-up started, by its recorded PID
	local f=$state/$1.pid pid
	[ -s "$f" ] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid"
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
		echo "host-down: stopped $1 (pid $pid)" >&2
	fi
	rm -f "$f"
}
stop libvirtd
stop tini # exits with libvirtd; this only catches a stray one
stop virtlogd

# libvirt leaves its LIBVIRT_* chains behind, empty; remove them.
for ipt in iptables ip6tables; do
	command -v $ipt >/dev/null || continue
	for t in filter nat mangle; do
		for c in INPUT OUTPUT FORWARD POSTROUTING; do
			for lc in LIBVIRT_INP LIBVIRT_OUT LIBVIRT_FWX LIBVIRT_FWI LIBVIRT_FWO LIBVIRT_PRT; do
				$ipt -t $t -D $c -j $lc 2>/dev/null
			done
		done
		for lc in LIBVIRT_INP LIBVIRT_OUT LIBVIRT_FWX LIBVIRT_FWI LIBVIRT_FWO LIBVIRT_PRT; do
			$ipt -t $t -F $lc 2>/dev/null && $ipt -t $t -X $lc 2>/dev/null
		done
	done
done
if [ -f "$state/ip_forward" ]; then
	cat "$state/ip_forward" >/proc/sys/net/ipv4/ip_forward
	rm -f "$state/ip_forward"
fi
rmdir "$state/users" "$state" 2>/dev/null
true
