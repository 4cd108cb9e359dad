#!/usr/bin/env bash
# Cold-start benchmark: `labctl version` and `labctl --help` against the test bed's
# `kubectl version --client` and `kubectl --help`, in one run.
#
# Builds labctl once as the releases are built (.goreleaser.yaml:
# CGO_ENABLED=0, -trimpath, -ldflags "-s -w"; kubectl is built the same
# way by hack/testenv.sh) and checks that it is static. Drops both binaries
# from the page cache (see evict), runs each a few times to read them back,
# then times RUNS runs of each,
# interleaved and alternating which goes first, with `date +%s%N` around
# every run, and measures the peak RSS of RUNS more runs of each with GNU
# time. Prints min and median of both and the ratios, and fails when
# labctl's median time is more than TIME_RATIO times kubectl's or its
# median peak RSS more than RSS_RATIO times kubectl's.
#
#   RUNS=30 TIME_RATIO=0.8 RSS_RATIO=1.2 WARMUP=3 hack/bench-coldstart.sh
#   LABCTL=bin/labctl hack/bench-coldstart.sh   # time a binary already built
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
command -v go >/dev/null 2>&1 || export PATH=/usr/local/go/bin:$PATH

runs=${RUNS:-30}
warmup=${WARMUP:-3}
time_ratio=${TIME_RATIO:-0.8}
rss_ratio=${RSS_RATIO:-1.2}
case "$runs$warmup" in *[!0-9]*) echo "RUNS and WARMUP must be whole numbers" >&2; exit 2 ;; esac
case "$time_ratio$rss_ratio" in *[!0-9.]*) echo "TIME_RATIO and RSS_RATIO must be numbers" >&2; exit 2 ;; esac
[ "$runs" -ge 1 ] || { echo "RUNS must be at least 1" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench: GNU time is missing (apt-get install time); it measures peak RSS" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# kubectl from the test bed; build it when missing (minutes, once).
testbed=${TESTBED_BIN:-$root/.testbed/bin}
kubectl=$testbed/kubectl
if [ ! -x "$kubectl" ]; then
	echo "bench: $kubectl missing; building the test bed (hack/testenv.sh)" >&2
	testbed=$(hack/testenv.sh | tail -n 1)
	kubectl=$testbed/kubectl
fi

labctl=${LABCTL:-}
if [ -z "$labctl" ]; then
	labctl=$tmp/labctl
	echo "bench: building labctl" >&2
	CGO_ENABLED=0 go build -trimpath \
		-ldflags "-s -w -X github.com/labctl/labctl/internal/versions.Version=bench" \
		-o "$labctl" .
fi
linkage=$(ldd "$labctl" 2>&1 || true) # ldd fails on a static binary
case "$linkage" in
*"not a dynamic executable"*) echo "bench: $labctl is static (ldd: not a dynamic executable)" >&2 ;;
*)
	echo "bench: $labctl is not static (the release build must be):" >&2
	echo "$linkage" >&2
	exit 1
	;;
esac

# stats FILE: "min median" in nanoseconds.
stats() {
	sort -n "$1" | awk '{ v[NR] = $1 } END {
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%d %d\n", v[1], m }'
}
ms() { awk -v n="$1" 'BEGIN { printf "%.1f", n / 1e6 }'; }
size() { du -k "$1" | awk '{ printf "%.1f MiB", $1 / 1024 }'; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

# Both must work before they are timed.
check() {
	if ! "$@" >"$tmp/out" 2>&1 </dev/null; then
		echo "bench: '$*' failed:" >&2
		cat "$tmp/out" >&2
		exit 1
	fi
}

# time_ns CMD...: wall time of one run in nanoseconds, output discarded.
time_ns() {
	local t0 t1
	t0=$(date +%s%N)
	"$@" >/dev/null 2>&1 </dev/null
	t1=$(date +%s%N)
	echo $((t1 - t0))
}

# rss_kib CMD...: peak resident set of one run in KiB (GNU time's %M).
rss_kib() {
	/usr/bin/time -f %M -o "$tmp/rss" "$@" >/dev/null 2>&1 </dev/null
	cat "$tmp/rss"
}

# evict FILE: drop FILE's pages from the page cache, so that the next run
# reads it back the way an installed binary is read: through exec's page
# faults and readahead. Without this the comparison is unfair. On this
# kernel (6.18, ext4 with large folios) a file just written keeps the large
# folios its writer made, and a fault maps a whole folio. labctl is linked
# by this script moments before it runs, and kubectl was read back long
# ago. Measured here: one labctl binary had a peak RSS of 63.6 MiB fresh
# from the linker, and 48.0 MiB once evicted and read back. kubectl was
# 43.1 MiB either way. Dirty pages cannot be dropped, so sync first.
evict() {
	sync "$1"
	dd if="$1" iflag=nocache count=0 status=none
}
evict "$labctl"
evict "$kubectl"

fail=0
# compare "LABEL A" "LABEL B": times a_cmd against b_cmd (arrays set by the
# caller), interleaved, then their peak RSS, and checks the ratios.
compare() {
	local la=$1 lb=$2 i
	check "${a_cmd[@]}"
	check "${b_cmd[@]}"
	for ((i = 0; i < warmup; i++)); do
		time_ns "${a_cmd[@]}" >/dev/null
		time_ns "${b_cmd[@]}" >/dev/null
	done
	: >"$tmp/a"
	: >"$tmp/b"
	: >"$tmp/base"
	for ((i = 0; i < runs; i++)); do
		if ((i % 2 == 0)); then
			time_ns "${a_cmd[@]}" >>"$tmp/a"
			time_ns "${b_cmd[@]}" >>"$tmp/b"
		else
			time_ns "${b_cmd[@]}" >>"$tmp/b"
			time_ns "${a_cmd[@]}" >>"$tmp/a"
		fi
		# The cost of the timing itself (fork + date): an empty program.
		time_ns /bin/true >>"$tmp/base"
	done
	: >"$tmp/a_rss"
	: >"$tmp/b_rss"
	for ((i = 0; i < runs; i++)); do
		rss_kib "${a_cmd[@]}" >>"$tmp/a_rss"
		rss_kib "${b_cmd[@]}" >>"$tmp/b_rss"
	done
	local a_min a_med b_min b_med base_min base_med a_rss_min a_rss b_rss_min b_rss ratio rss
	read -r a_min a_med < <(stats "$tmp/a")
	read -r b_min b_med < <(stats "$tmp/b")
	read -r base_min base_med < <(stats "$tmp/base")
	read -r a_rss_min a_rss < <(stats "$tmp/a_rss")
	read -r b_rss_min b_rss < <(stats "$tmp/b_rss")

	echo "$la against $lb: $runs interleaved runs each (after $warmup warm-up runs), wall time:"
	printf '  %-34s min %7s ms   median %7s ms   (%s)\n' "$la" "$(ms "$a_min")" "$(ms "$a_med")" "$(size "${a_cmd[0]}")"
	printf '  %-34s min %7s ms   median %7s ms   (%s)\n' "$lb" "$(ms "$b_min")" "$(ms "$b_med")" "$(size "${b_cmd[0]}")"
	printf '  %-34s min %7s ms   median %7s ms\n' "/bin/true (timing overhead)" "$(ms "$base_min")" "$(ms "$base_med")"
	echo "peak RSS, $runs runs each (median):"
	printf '  %-34s %7s MiB\n' "$la" "$(mib "$a_rss")"
	printf '  %-34s %7s MiB\n' "$lb" "$(mib "$b_rss")"
	ratio=$(awk -v a="$a_med" -v b="$b_med" 'BEGIN { printf "%.2f", a / b }')
	rss=$(awk -v a="$a_rss" -v b="$b_rss" 'BEGIN { printf "%.2f", a / b }')
	echo "  time ratio (median): $ratio (limit $time_ratio)"
	echo "  RSS ratio (median):  $rss (limit $rss_ratio)"
	if awk -v r="$ratio" -v l="$time_ratio" 'BEGIN { exit !(r > l) }'; then
		echo "FAIL: $la takes $ratio x the time of $lb, over the limit $time_ratio" >&2
		fail=1
	fi
	if awk -v r="$rss" -v l="$rss_ratio" 'BEGIN { exit !(r > l) }'; then
		echo "FAIL: $la's peak RSS is $rss x that of $lb, over the limit $rss_ratio" >&2
		fail=1
	fi
	echo
}

a_cmd=("$labctl" version)
b_cmd=("$kubectl" version --client)
compare "labctl version" "kubectl version --client"
a_cmd=("$labctl" --help)
b_cmd=("$kubectl" --help)
compare "labctl --help" "kubectl --help"

[ "$fail" = 0 ] || exit 1
echo "ok: labctl version and labctl --help are within $time_ratio x kubectl's time and $rss_ratio x its peak RSS"
