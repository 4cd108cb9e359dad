#!/usr/bin/env bash
# Prints what failed in a `go test` log (make test keeps one): each
# failing test, its own lines (file:line: message) and panics, without
# the process logs the box dumps beside them. CI shows only the end of
# the output, and a failing box test's dumped logs would push the
# failure itself out of sight.
#   hack/test-summary.sh LOG [MAX_LINES]
set -euo pipefail
log=${1:?usage: test-summary.sh LOG [MAX_LINES]}
max=${2:-120}
[ -r "$log" ] || { echo "test-summary: cannot read $log" >&2; exit 1; }
echo
echo "==> what failed (the whole output: $log)"
# A test's own lines are "    name_test.go:123: ...". Lines the box
# dumps from a process log are indented too but carry no test file.
grep -E -- '^[[:space:]]*--- FAIL|^FAIL|^panic:|^[[:space:]]+[A-Za-z0-9_]+_test\.go:[0-9]+: |^[[:space:]]+Test[A-Za-z0-9_/]+ \([0-9]' "$log" |
	grep -v -E -- "_test\.go:[0-9]+: box: .*'s log \(" |
	cut -c1-400 | tail -n "$max" || echo "(no failing test named: see the log)"
