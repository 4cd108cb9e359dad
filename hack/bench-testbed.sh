#!/usr/bin/env bash
# Benchmark of the test bed build, side by side:
#   cold   hack/testenv.sh SET with an empty Go build cache and no binaries
#   warm   the same command again: everything is built, so it only checks
#   cache  (BENCH_CACHE=1) the binaries removed but the Go build cache kept,
#          as on a CI runner that caches GOCACHE but not .testbed
# The module cache (GOMODCACHE) is kept in every run: downloads depend on
# the network, not on this machine, and `go mod download` is measured apart.
# Each binary's own time is in the "built NAME in N s" lines.
#
#   hack/bench-testbed.sh [SET...]      default: controllers
# BENCH_KEEP=DIR keeps the cold run's binaries there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || set -- controllers
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() { # label, bin folder, args...
  local label=$1 bin=$2
  shift 2
  local start
  start=$(date +%s)
  TESTBED_BIN=$bin GOCACHE=$work/gocache "$here/testenv.sh" "$@" 2>&1 >/dev/null | sed "s/^/  [$label] /"
  echo "$label: $(($(date +%s) - start)) s"
}

echo "go mod download of the wrappers (usually a no-op: the module cache is kept):"
start=$(date +%s)
for d in "$here"/testbed/*/; do (cd "$d" && go mod download); done
echo "download: $(($(date +%s) - start)) s"
run cold "$work/bin" "$@"
run warm "$work/bin" "$@"
if [ -n "${BENCH_CACHE:-}" ]; then run cache "$work/bin2" "$@"; fi
if [ -n "${BENCH_KEEP:-}" ]; then mkdir -p "$BENCH_KEEP" && cp -n "$work"/bin/* "$BENCH_KEEP"/; fi
