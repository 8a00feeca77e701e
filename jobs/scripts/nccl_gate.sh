#!/bin/bash
# The nccl-test health gate. Runs in the launcher of every nccl-test MPIJob (the whole script is the
# launcher's command; jobs/nccl_test.py embeds it) and fails the job -- non-zero exit, so the
# MPIJob is Failed -- when the network is not what the node group promises:
#   - on an EFA group, NCCL did not use EFA on some host (the silent fall-back to sockets), by the fabric
#     rule of the jobs' checks (jobs/scripts/fabric_rule.py; written again here because the nccl-tests
#     images are not known to carry python3);
#   - the peak bus bandwidth of all sizes and both in-place and out-of-place is below a threshold.
#
#   nccl_gate.sh run   <require-efa 0|1> <min-busbw-GB/s> -- <command...>   run, tee, then check
#   nccl_gate.sh check <log> <require-efa 0|1> <min-busbw-GB/s>             check a log
#
# The log parser is tolerant: lines may carry mpirun's --tag-output prefix ("[1,0]<stdout>:"),
# columns may be out of alignment, and both nccl-tests layouts are read (<= 2.11: "... busbw
# error"; >= 2.13: a root column and "#wrong"): the busbw columns are found from the header. POSIX
# awk only (the images ship mawk).
set -uo pipefail

check() {
  local log=$1 require_efa=$2 min_busbw=$3
  awk -v require_efa="$require_efa" -v min_busbw="$min_busbw" '
    { sub(/^\[[0-9]+,[0-9]+\]<std(out|err)>: ?/, "") }
    { low = tolower($0) }
    # The fabric rule (jobs/scripts/fabric_rule.py, network_verdict; the same per host as mpi_fabric.py):
    # per host (NCCL'"'"'s "<host>:<pid>:<tid> [<dev>]" prefix), the networks NCCL chose ("Using network X",
    # "via NET/X/") and aws-ofi-nccl'"'"'s provider ("Selected provider is P"); EFA is libfabric/ofi with
    # provider efa, anything else is a fall-back. tests/test_fabric_rule.py holds the two to the same verdicts.
    index(low, " nccl ") || index(low, "nccl info") {
      host = "?"
      if (match($0, /^[^ :[]+:[0-9]+:[0-9]+ \[[0-9]+\] NCCL /)) host = substr($0, 1, index($0, ":") - 1)
      value = ""
      if ((i = index(low, "nccl info using network ")) > 0) {
        value = substr(low, i + 24); sub(/[ \t\r]+$/, "", value)
      } else if ((i = index(low, "via net/")) > 0) {
        value = substr(low, i + 8); sub(/\/.*$/, "", value)
      }
      if (value != "") {
        chose[host] = 1
        if (value != "aws libfabric" && value != "libfabric" && value != "ofi" && !index(other[host] " ", " " value " ")) {
          other[host] = other[host] " " value
        }
        if (value == "socket") sockets = 1
      }
      if ((i = index(low, "net/ofi selected provider is ")) > 0) {
        value = substr(low, i + 29); sub(/[ ,].*$/, "", value)
        chose[host] = 1
        if (value != "efa") other[host] = other[host] " provider " value
      }
    }
    /^#/ && index($0, "busbw") && index($0, "size") {
      ncols = 0
      n = split($0, h, " ")
      for (i = 1; i <= n; i++) if (h[i] == "busbw") cols[++ncols] = i - 1  # data rows have no leading "#"
      next
    }
    /^#/ && index(low, "avg bus bandwidth") { avg = $NF }
    ncols > 0 && $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ {
      rows++
      for (c = 1; c <= ncols; c++) {
        v = $(cols[c])
        if (v ~ /^[0-9]+(\.[0-9]+)?$/ && (best == "" || v + 0 > best + 0)) { best = v + 0; at = $1 }
      }
    }
    END {
      fail = 0
      if (rows == 0) { print "nccl-gate: FAIL: no nccl-tests result rows in the log"; exit 1 }
      printf "nccl-gate: %d sizes, peak bus bandwidth %.2f GB/s (at %s bytes), average %s GB/s\n", rows, best, at, (avg == "" ? "n/a" : avg)
      seen = 0; hosts = ""
      for (hn in chose) seen++
      for (hn in other) hosts = hosts " " hn ":" other[hn]
      if (require_efa == 1 && (seen == 0 || hosts != "")) {
        print "nccl-gate: FAIL: NCCL did not use the EFA provider on an EFA node group (" (seen == 0 ? "no network choice in the log" : "not EFA on" hosts) (sockets ? ", it fell back to sockets" : "") "): check the EFA device plugin, the EFA requests of the workers and the aws-ofi-nccl plugin in the image"
        fail = 1
      } else if (require_efa == 1) {
        print "nccl-gate: OK: NCCL selected the EFA provider"
      }
      if (best + 0 < min_busbw + 0) {
        printf "nccl-gate: FAIL: peak bus bandwidth %.2f GB/s is below minBusBandwidthGBps %s\n", best, min_busbw
        fail = 1
      } else {
        printf "nccl-gate: OK: peak bus bandwidth %.2f GB/s >= %s GB/s\n", best, min_busbw
      }
      exit fail
    }
  ' "$log"
}

mode=${1:-}
case "$mode" in
  check)
    [ $# -eq 4 ] || { echo "usage: $0 check <log> <require-efa 0|1> <min-busbw-GB/s>" >&2; exit 2; }
    check "$2" "$3" "$4"
    ;;
  run)
    [ $# -ge 5 ] && [ "$4" = "--" ] || { echo "usage: $0 run <require-efa 0|1> <min-busbw-GB/s> -- <command...>" >&2; exit 2; }
    require_efa=$2 min_busbw=$3
    shift 4
    log=$(mktemp)
    "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -ne 0 ]; then
      echo "nccl-gate: FAIL: the test exited with status $rc"
      exit "$rc"
    fi
    check "$log" "$require_efa" "$min_busbw"
    ;;
  *)
    echo "usage: $0 run|check ..." >&2
    exit 2
    ;;
esac
