#!/usr/bin/env bash
# Run a command and print its wall time and CPU time under a label, keeping its exit status:
# `make test` prints one such line per pass of the suite (each database, each smoke run), and
# appends it to $TEST_TIMES when set, so that the run ends with every pass's time in one table.
# The CPU time (user + system) is that of the command and the processes it waited for (pytest's
# runqueue and manage.py children, Spark's JVMs); the database servers' own is not in it. On a
# 2-core machine, CPU rather than waiting is what bounds `make test`: the sum of the CPU column
# over 2 is about the least wall time the passes can take together.
#   scripts/timed.sh LABEL COMMAND [ARGS...]
set -u
label=$1
shift
start=$(date +%s)
"$@"
status=$?
took=$(($(date +%s) - start))
# `times`' second line: the user and system time of the waited-for children, as "1m2.345s 0m6.789s".
# (A builtin with a redirection runs in this shell; in a pipe or $(...) it would count a subshell's.)
tmp=$(mktemp)
times >"$tmp"
read -r user system < <(tail -n 1 "$tmp")
rm -f "$tmp"
seconds() { awk -v t="$1" 'BEGIN { split(t, p, "m"); sub("s", "", p[2]); printf "%d", p[1] * 60 + p[2] }'; }
cpu=$(($(seconds "$user") + $(seconds "$system")))
line=$(printf '%-28s %4d s  (%dm%02ds)  CPU %4d s%s' "$label" "$took" $((took / 60)) $((took % 60)) "$cpu" \
    "$([ "$status" -eq 0 ] || echo "  FAILED, exit $status")")
echo "== wall time: $line"
if [ -n "${TEST_TIMES:-}" ]; then
    echo "$line" >>"$TEST_TIMES"
fi
exit "$status"
