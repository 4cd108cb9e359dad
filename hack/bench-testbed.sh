#!/usr/bin/env bash
# Benchmark of the test bed build: the cold and the warm run side by side,
# per binary (per go build, where one builds several).
#   cold   hack/testenv.sh SET into an empty folder with an empty Go build
#          cache (GOCACHE)
#   warm   the same command again: everything is built, so it only checks
#   cache  (BENCH_CACHE=1) the binaries removed but the Go build cache kept,
#          as on a CI runner that caches GOCACHE but not .testbed
# The module cache (GOMODCACHE) is kept: downloads depend on the network,
# not on this machine; they are timed apart first (`go mod download` of
# every wrapper, and the upstream sources), usually a no-op.
# BENCH_MODCACHE=empty uses an empty module cache too, so every download is
# in the cold run.
#
#   hack/bench-testbed.sh [SET...]      default: all (names as testenv.sh takes)
#
# For a before/after comparison run it once on each checkout; the figures
# and the machine's load (printed) go to docs/testing.md.
# BENCH_KEEP=DIR keeps the cold run's binaries there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || set -- all
work=$(mktemp -d)
export GOCACHE=$work/gocache
if [ "${BENCH_MODCACHE:-}" = empty ]; then export GOMODCACHE=$work/gomod; fi
cleanup() {
  if [ "${BENCH_MODCACHE:-}" = empty ]; then go clean -modcache 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cpus, load average $(load), $(go version | cut -d' ' -f3), testenv.sh $*"

if [ "${BENCH_MODCACHE:-}" != empty ]; then
  start=$(date +%s)
  for d in "$here"/testbed/*/; do (cd "$d" && go mod download); done
  "$here/upstream-src.sh" all >/dev/null 2>"$work/src.log" || {
    cat "$work/src.log" >&2
    exit 1
  }
  echo "downloads (module cache kept, upstream sources): $(($(date +%s) - start)) s"
fi

# run LABEL BIN: runs testenv.sh, keeps its "built ... in N s" lines in
# $work/LABEL.lines, prints the wall clock and CPU time.
run() {
  local label=$1 bin=$2 start t0 t1
  shift 2
  start=$(date +%s%N)
  t0=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
  TESTBED_BIN=$bin "$here/testenv.sh" "$@" 2>"$work/$label.log" >/dev/null || {
    cat "$work/$label.log" >&2
    echo "$label: hack/testenv.sh failed" >&2
    exit 1
  }
  # cutime and cstime: every process testenv.sh ran, compilers included.
  t1=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
  local ms=$((($(date +%s%N) - start) / 1000000))
  printf '%s: %d.%01d s wall, %d s CPU (user+system), load average after %s\n' "$label" \
    $((ms / 1000)) $((ms % 1000 / 100)) $(((t1 - t0) / $(getconf CLK_TCK))) "$(load)"
  grep -E '^testbed: built .* in [0-9]+ s$' "$work/$label.log" | sed -E 's/^testbed: built (.*) in ([0-9]+) s$/\2\t\1/' >"$work/$label.lines" || true
}

run cold "$work/bin" "$@"
run warm "$work/bin" "$@"
if [ -n "${BENCH_CACHE:-}" ]; then run cache "$work/bin2" "$@"; fi

# The table: one row per go build of the cold run, with what the warm run
# said of the same binaries.
echo
printf '%-64s %7s  %s\n' "binaries (one go build each row)" "cold s" "warm"
while IFS=$'\t' read -r secs names; do
  warm=present
  for n in $names; do
    grep -qx "testbed: $n present" "$work/warm.log" || warm="REBUILT"
  done
  printf '%-64s %7s  %s\n' "$names" "$secs" "$warm"
done <"$work/cold.lines"
if [ -s "$work/warm.lines" ]; then
  echo "error: the warm run rebuilt:" >&2
  cat "$work/warm.lines" >&2
  exit 1
fi
if [ -n "${BENCH_CACHE:-}" ]; then
  echo
  echo "cache run (binaries removed, build cache kept):"
  sed 's/^/  /' "$work/cache.lines"
fi
if [ -n "${BENCH_KEEP:-}" ]; then mkdir -p "$BENCH_KEEP" && cp -n "$work"/bin/* "$BENCH_KEEP"/; fi
