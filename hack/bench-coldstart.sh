#!/usr/bin/env bash
# Cold-start benchmark: `labctl version` against the test bed's
# `kubectl version --client`, in one run.
#
# Builds labctl once (release flags: -trimpath -s -w, CGO_ENABLED=0, as
# kubectl is built by hack/testenv.sh), runs each binary a few times to warm
# the page cache, then times RUNS runs of each, interleaved and alternating
# which goes first, with `date +%s%N` around every run. Prints min and median
# of both and the ratio, and fails when labctl's median is more than MARGIN
# percent slower than kubectl's.
#
#   RUNS=30 MARGIN=10 WARMUP=3 hack/bench-coldstart.sh
#   LABCTL=bin/labctl hack/bench-coldstart.sh   # time a binary already built
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
command -v go >/dev/null 2>&1 || export PATH=/usr/local/go/bin:$PATH

runs=${RUNS:-30}
margin=${MARGIN:-10}
warmup=${WARMUP:-3}
case "$runs$margin$warmup" in *[!0-9]*) echo "RUNS, MARGIN and WARMUP must be whole numbers" >&2; exit 2 ;; esac
[ "$runs" -ge 1 ] || { echo "RUNS must be at least 1" >&2; exit 2; }

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

a_cmd=("$labctl" version)
b_cmd=("$kubectl" version --client)

# Both must work before they are timed.
check() {
	if ! "$@" >"$tmp/out" 2>&1 </dev/null; then
		echo "bench: '$*' failed:" >&2
		cat "$tmp/out" >&2
		exit 1
	fi
}
check "${a_cmd[@]}"
check "${b_cmd[@]}"

# time_ns CMD...: wall time of one run in nanoseconds, output discarded.
time_ns() {
	local t0 t1
	t0=$(date +%s%N)
	"$@" >/dev/null 2>&1 </dev/null
	t1=$(date +%s%N)
	echo $((t1 - t0))
}

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

# stats FILE: "min median" in nanoseconds.
stats() {
	sort -n "$1" | awk '{ v[NR] = $1 } END {
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%d %d\n", v[1], m }'
}
read -r a_min a_med < <(stats "$tmp/a")
read -r b_min b_med < <(stats "$tmp/b")
read -r base_min base_med < <(stats "$tmp/base")

ms() { awk -v n="$1" 'BEGIN { printf "%.1f", n / 1e6 }'; }
size() { du -k "$1" | awk '{ printf "%.1f MiB", $1 / 1024 }'; }

echo "cold start, $runs interleaved runs each (after $warmup warm-up runs), wall time:"
printf '  %-34s min %7s ms   median %7s ms   (%s)\n' "labctl version" "$(ms "$a_min")" "$(ms "$a_med")" "$(size "$labctl")"
printf '  %-34s min %7s ms   median %7s ms   (%s)\n' "kubectl version --client" "$(ms "$b_min")" "$(ms "$b_med")" "$(size "$kubectl")"
printf '  %-34s min %7s ms   median %7s ms\n' "/bin/true (timing overhead)" "$(ms "$base_min")" "$(ms "$base_med")"
ratio=$(awk -v a="$a_med" -v b="$b_med" 'BEGIN { printf "%.2f", a / b }')
echo "  ratio labctl/kubectl (median): $ratio (limit $(awk -v m="$margin" 'BEGIN { printf "%.2f", 1 + m / 100 }'))"

if awk -v a="$a_med" -v b="$b_med" -v m="$margin" 'BEGIN { exit !(a > b * (1 + m / 100)) }'; then
	echo "FAIL: labctl's cold start is more than ${margin}% slower than kubectl's" >&2
	exit 1
fi
echo "ok: labctl starts no slower than kubectl (within ${margin}%)"
