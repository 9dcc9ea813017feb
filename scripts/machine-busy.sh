#!/usr/bin/env bash
# Run a command and print how busy the whole machine's CPUs were while it ran, keeping its exit
# status. `make test` runs its passes under it: timed.sh gives each pass's own CPU, but not the
# database servers', which on a 2-core machine decide whether a fourth job at a time would find
# an idle core (TEST_JOBS) or only slow the other three down. Linux only (/proc/stat); elsewhere
# the command runs and nothing is printed.
#   scripts/machine-busy.sh COMMAND [ARGS...]
set -u
# user nice system idle iowait irq softirq steal, in clock ticks summed over every CPU.
sample() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat 2>/dev/null; }
read -r busy0 idle0 < <(sample) || true
"$@"
status=$?
read -r busy1 idle1 < <(sample) || true
if [ -n "${busy0:-}" ] && [ -n "${busy1:-}" ]; then
    hz=$(getconf CLK_TCK)
    busy=$(((busy1 - busy0) / hz))
    idle=$(((idle1 - idle0) / hz))
    total=$((busy + idle))
    echo "== the machine's CPUs ($(nproc) cores): busy ${busy} core-s, idle ${idle} core-s" \
         "($((total > 0 ? 100 * busy / total : 0))% busy; the database servers' CPU is in it)"
fi
exit "$status"
