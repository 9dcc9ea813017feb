#!/usr/bin/env bash
# Run a command and print its wall time under a label, keeping its exit status: `make test`
# prints one such line per pass of the suite (each database, each smoke run), and appends it to
# $TEST_TIMES when set, so that the run ends with every pass's time in one table.
#   scripts/timed.sh LABEL COMMAND [ARGS...]
set -u
label=$1
shift
start=$(date +%s)
"$@"
status=$?
took=$(($(date +%s) - start))
line=$(printf '%-28s %4d s  (%dm%02ds)%s' "$label" "$took" $((took / 60)) $((took % 60)) \
    "$([ "$status" -eq 0 ] || echo "  FAILED, exit $status")")
echo "== wall time: $line"
if [ -n "${TEST_TIMES:-}" ]; then
    echo "$line" >>"$TEST_TIMES"
fi
exit "$status"
