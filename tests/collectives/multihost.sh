#!/usr/bin/env bash
# Collectives across hosts: three test hosts, each a network namespace with
# its own address on one bridge, started the way a cluster starts them (one
# halrun per host with --nnodes/--node-rank/--master-addr), then faults
# injected between them. Uses only the addresses of the namespaces it makes,
# and removes them at the end. Exit 77 (skipped) where namespaces cannot be
# made, saying why.
#
#   multihost.sh HALRUN WORKER PLUGIN_DIR HALBENCH HALCONFORM FAKE_BACKEND_DIR
set -uo pipefail
halrun=$1 worker=$2 plugins=$3 halbench=$4 halconform=$5 fakes=$6
prefix="halmh$$"
subnet=10.231.$(($$ % 200 + 20))  # the test hosts' own /24, one per run
hosts=3 per_host=2
work=$(mktemp -d)
failed=0

skip() { echo "SKIPPED: $*"; exit 77; }
elapsed() { awk -v now="$(date +%s.%N)" -v then="$1" 'BEGIN { printf "%.2f", now - then }'; }
fail() { echo "FAILED: $*"; failed=1; }

cleanup() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix-"); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || skip "making network namespaces (ip netns add) needs root; run as root to test across hosts"
command -v ip >/dev/null || skip "iproute2's ip is missing; scripts/install-deps.sh installs it"
ip netns add "$prefix-hub" 2>"$work/why" || skip "cannot make a network namespace here: $(cat "$work/why")"
ip -n "$prefix-hub" link add br0 type bridge || skip "cannot make a bridge in a network namespace"
ip -n "$prefix-hub" link set br0 up
for h in $(seq 0 $((hosts - 1))); do
  ns="$prefix-h$h"
  ip netns add "$ns"
  ip link add eth0 netns "$ns" type veth peer name port$h netns "$prefix-hub"
  ip -n "$prefix-hub" link set port$h master br0 up
  ip -n "$ns" addr add "$subnet.$((h + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done
echo "hosts: $(for h in $(seq 0 $((hosts - 1))); do printf '%s=%s.%d ' "$prefix-h$h" "$subnet" $((h + 1)); done)"

token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
port=29400

# run_job NAME RANKS_PER_HOST COMMAND...: one halrun per host, in parallel;
# each host's output in $work/NAME.h<host>, its exit status in .status.
# job_env (NAME=VALUE words) overrides the ranks' environment.
job_env=()
run_job() {
  local name=$1 ranks=$2
  shift 2
  port=$((port + 2))
  local pids=()
  for h in $(seq 0 $((hosts - 1))); do
    ip netns exec "$prefix-h$h" env HAL_BACKENDS=host HAL_BACKEND_PATH="$plugins" HAL_COLL_ENGINE=gloo \
      HAL_TEST_EXPECT_ENGINE=gloo HAL_GLOO_INTERFACE=eth0 HAL_STORE_TOKEN="$token" "${job_env[@]}" \
      "$halrun" --nnodes $hosts --node-rank "$h" -n "$ranks" --master-addr "$subnet.1" --master-port $port -- "$@" \
      >"$work/$name.h$h" 2>&1 &
    pids+=($!)
  done
  for h in $(seq 0 $((hosts - 1))); do
    wait "${pids[$h]}"
    echo $? >"$work/$name.h$h.status"
  done
}

show() {  # the output of every host of a job
  for h in $(seq 0 $((hosts - 1))); do
    echo "--- $1 on host $h (exit $(cat "$work/$1.h$h.status" 2>/dev/null))"
    cat "$work/$1.h$h"
  done
}

# expect_success JOB [HOST...]: every host's halrun (or the ones named) exited 0.
expect_success() {
  local job=$1
  shift
  for h in ${@:-$(seq 0 $((hosts - 1)))}; do
    [ "$(cat "$work/$job.h$h.status")" = 0 ] || { fail "$job: host $h's halrun exited $(cat "$work/$job.h$h.status")"; show "$job"; return; }
  done
  echo "ok: $job"
}

# Every operation x dtype x in/out-of-place, checked element by element, 6 ranks on 3 hosts.
start=$(date +%s.%N)
run_job ops $per_host "$worker" ops
ops_seconds=$(elapsed "$start")
expect_success ops
echo "ops across $hosts hosts x $per_host ranks: ${ops_seconds} s"

# Bus bandwidth across the hosts, one rank each, nccl-tests columns (#wrong must be 0).
run_job bench 1 "$halbench" coll -b 8 -e 4M -f 8 -n 10 -w 2 --no-mpi
expect_success bench
grep -v '^\[0\] # engine' "$work/bench.h0" | grep '^\[0\]'
grep -q '#wrong total: 0$' "$work/bench.h0" || { fail "halbench coll across hosts: #wrong is not 0"; show bench; }

# halconform's all_reduce bus bandwidth case across the hosts, one rank per
# host (each host's halconform runs the case on its device as one rank of the
# job), judged as nccl-tests' results are: #wrong 0, and the Avg bus
# bandwidth and the largest size's against the profile's floors. Then the
# same with floors no link reaches, and with an all_reduce that computes
# nothing (fake_lazy): every host's report must FAIL, naming why.
conform() {  # NAME FLOOR_GBPS: halconform on every host with that floor
  cat >"$work/$1.toml" <<PROFILE
name = "multihost"
tiers = ["performance"]
cases = ["performance.collectives.all_reduce_bus_bandwidth"]
quick = true
timeout_seconds = 60
[[thresholds]]
[thresholds.values]
"collectives.all_reduce.min_avg_bus_gbps" = $2
"collectives.all_reduce.min_bus_gbps" = $2
PROFILE
  run_job "$1" 1 sh -c 'exec "$0" --profile "$1" --report-dir "$2.rank$RANK" --jobs 1' \
    "$halconform" "$work/$1.toml" "$work/$1-report"
}
# expect_conform JOB OUTCOME DEVICE TEXT: every host's halconform gave the case that outcome (a grep
# pattern: WARN is a pass whose runs scattered on a loaded machine), its report TEXT.
expect_conform() {
  local job=$1 outcome=$2 device=$3 text=$4
  for h in $(seq 0 $((hosts - 1))); do
    grep -q "$outcome *performance.collectives.all_reduce_bus_bandwidth on $device" "$work/$job.h$h" &&
      grep -q -- "$text" "$work/$job-report.rank$h/conformance.json" ||
      { fail "$job: host $h's halconform did not report $outcome with '$text'"; show "$job"; return; }
  done
  echo "ok: $job ($(grep -o -m1 "$outcome *performance" "$work/$job.h0" | cut -d' ' -f1) on host 0, as on every host)"
}
start=$(date +%s.%N)
conform conform 0.001
expect_success conform
expect_conform conform '\(PASS\|WARN\)' host:0 '#wrong total: 0; Avg bus bandwidth'
grep -o 'rank 0 of 3 ([^)]*)' "$work/conform-report.rank0/conformance.json" | head -1 | sed 's/^/  /'
grep -o '#wrong total: 0; Avg bus bandwidth: [0-9.]* GB/s' "$work/conform-report.rank0/conformance.json" | sed 's/^/  /'
conform conform_floor 1000000
expect_conform conform_floor FAIL host:0 'is below the profile minimum 1000000.000 GB/s (collectives.all_reduce.min_avg_bus_gbps)'
job_env=(HAL_BACKENDS=fake_lazy "HAL_BACKEND_PATH=$fakes")
conform conform_lazy 0.001
job_env=()
expect_conform conform_lazy FAIL fake_lazy:0 '#wrong [1-9]'
echo "halconform across $hosts hosts (pass, floor, lazy all_reduce): $(elapsed "$start") s"

# A link cut mid-collective: host 2 (ranks 4 and 5) loses its link once every
# rank loops all_reduces; every rank must fail within the 3 s timeout (plus
# the margin the worker allows), and the others must name a cut rank.
run_job cut $per_host "$worker" cut 4 5 &
job=$!
for _ in $(seq 1 300); do
  ready=$(cat "$work"/cut.h* 2>/dev/null | grep -c '] ready$')
  [ "$ready" -ge $((hosts * per_host)) ] && break
  sleep 0.1
done
cut_at=$(date +%s.%N)
ip -n "$prefix-hub" link set port2 down
wait $job
cut_seconds=$(elapsed "$cut_at")
expect_success cut
grep -h 'error after' "$work"/cut.h* | sed 's/^/  /'
echo "link cut: every rank ended ${cut_seconds} s after the cut"
ip -n "$prefix-hub" link set port2 up

# A rank stopped with SIGSTOP on another host: the processes are alive and
# their connections open, so only the timeout can end the wait; the ranks of
# hosts 0 and 1 must fail naming rank 4.
run_job stop $per_host "$worker" cut 4 4 &
job=$!
for _ in $(seq 1 300); do
  [ "$(cat "$work"/stop.h* 2>/dev/null | grep -c '] ready$')" -ge $((hosts * per_host)) ] && break
  sleep 0.1
done
victim=""
for pid in $(ip netns pids "$prefix-h2"); do
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'RANK=4' &&
     tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "cut 4 4"; then victim=$pid; fi
done
if [ -z "$victim" ]; then
  fail "could not find rank 4's process on host 2"
else
  kill -STOP "$victim"
fi
# The four ranks of hosts 0 and 1 end on their own; then rank 4 is let go.
for _ in $(seq 1 200); do
  [ "$(cat "$work/stop.h0" "$work/stop.h1" | grep -c 'error after')" -ge 4 ] && break
  sleep 0.1
done
[ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null
wait $job
expect_success stop 0 1
grep -q '^\[5\] FAILED' "$work/stop.h2" && { fail "stop: rank 5, beside the stopped rank, did not name it"; show stop; }
grep -h 'error after' "$work/stop.h0" "$work/stop.h1" "$work/stop.h2" | sed 's/^/  /'

# A rank killed on another host: rank 5 (host 2) dies with SIGKILL inside an
# all_reduce; every rank of hosts 0 and 1 fails within the 3 s timeout naming
# it (host 2's halrun then stops rank 4 and exits with rank 5's signal).
run_job kill $per_host "$worker" kill 5
expect_success kill 0 1
grep -q 'rank 5 was killed by signal 9' "$work/kill.h2" || { fail "kill: host 2's halrun did not name rank 5"; show kill; }
grep -h 'error after' "$work/kill.h0" "$work/kill.h1" | sed 's/^/  /'

# The MPI engine across the hosts: Open MPI's mpirun starts its daemons
# through a launch agent (plm_rsh_agent, where a cluster has ssh) that enters
# the host's namespace; daemons and ranks talk over eth0 only. Each host also
# gets a UTS namespace named as in the hostfile: Open MPI matches daemons to
# nodes by the name they report, and with the machine's one name every daemon
# claimed mpirun's own node, which made its routing fail at random.
if command -v mpirun >/dev/null; then
  cat >"$work/agent" <<AGENT
#!/bin/sh
# Called as: agent [ssh options] HOST COMMAND...
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1
shift
exec ip netns exec "$prefix-\$host" unshare --uts sh -c "hostname \$host && \$*"
AGENT
  chmod +x "$work/agent"
  # mpirun itself runs on host 0 under its name, so host 0 is its local node.
  mpirun_on_h0() { ip netns exec "$prefix-h0" unshare --uts sh -c 'hostname h0 && exec "$@"' sh "$@"; }
  for h in $(seq 0 $((hosts - 1))); do echo "h$h slots=$per_host"; done >"$work/hostfile"
  port=$((port + 2))
  mpirun_on_h0 timeout 180 mpirun --allow-run-as-root -np $((hosts * per_host)) --hostfile "$work/hostfile" \
    --mca plm_rsh_agent "$work/agent" --mca oob_tcp_if_include eth0 --mca btl_tcp_if_include eth0 --mca btl tcp,self \
    -x HAL_BACKENDS=host -x HAL_BACKEND_PATH="$plugins" -x HAL_COLL_ENGINE=mpi -x HAL_TEST_EXPECT_ENGINE=mpi \
    -x MASTER_ADDR="$subnet.1" -x MASTER_PORT=$port \
    sh -c "'$worker' ops; status=\$?; echo \"rank \$OMPI_COMM_WORLD_RANK on \$(ip -4 -o addr show eth0 | awk '{print \$4}') exit \$status\"; exit \$status" \
    >"$work/mpi.h0" 2>&1
  mpi_status=$?
  grep '^rank ' "$work/mpi.h0" | sort | sed 's/^/  /'
  if [ $mpi_status = 0 ] && [ "$(grep -c '^rank .* exit 0$' "$work/mpi.h0")" = $((hosts * per_host)) ]; then
    echo "ok: mpi"
  else
    fail "mpi: mpirun across the hosts exited $mpi_status"
    cat "$work/mpi.h0"
  fi
  # halconform's bus bandwidth case under mpirun, one rank per host, on the MPI engine.
  for h in $(seq 0 $((hosts - 1))); do echo "h$h slots=1"; done >"$work/hostfile1"
  port=$((port + 2))
  mpirun_on_h0 timeout 120 mpirun --allow-run-as-root -np $hosts --hostfile "$work/hostfile1" \
    --mca plm_rsh_agent "$work/agent" --mca oob_tcp_if_include eth0 --mca btl_tcp_if_include eth0 --mca btl tcp,self \
    -x HAL_BACKENDS=host -x HAL_BACKEND_PATH="$plugins" -x MASTER_ADDR="$subnet.1" -x MASTER_PORT=$port \
    sh -c 'exec "$0" --profile "$1" --report-dir "$2.rank$OMPI_COMM_WORLD_RANK"' \
    "$halconform" "$work/conform.toml" "$work/conform_mpi-report" >"$work/conform_mpi.h0" 2>&1
  passed=0
  for h in $(seq 0 $((hosts - 1))); do
    grep -q '#wrong total: 0; Avg bus bandwidth' "$work/conform_mpi-report.rank$h/conformance.json" 2>/dev/null &&
      grep -q 'communicator: mpi' "$work/conform_mpi-report.rank$h/conformance.json" && passed=$((passed + 1))
  done
  if [ "$(grep -c '\(PASS\|WARN\) *performance.collectives.all_reduce_bus_bandwidth on host:0' "$work/conform_mpi.h0")" = $hosts ] &&
     [ $passed = $hosts ]; then
    echo "ok: conform_mpi (PASS on every host, MPI engine)"
  else
    fail "conform_mpi: halconform under mpirun did not PASS on every host with #wrong 0"
    cat "$work/conform_mpi.h0"
  fi
else
  echo "mpi: skipped, mpirun (openmpi-bin) is missing; scripts/install-deps.sh installs it"
fi

# Packet loss (nftables drops 1% of every host's outgoing packets): the
# results stay right, only slower. netem is not available on this kernel.
if command -v nft >/dev/null; then
  for h in $(seq 0 $((hosts - 1))); do
    ip netns exec "$prefix-h$h" nft -f - <<'RULES'
table inet loss {
  chain out { type filter hook output priority 0; numgen random mod 100 < 1 drop; }
}
RULES
  done
  start=$(date +%s.%N)
  run_job lossy $per_host "$worker" ops
  lossy_seconds=$(elapsed "$start")
  expect_success lossy
  echo "ops with 1% packet loss: ${lossy_seconds} s (without: ${ops_seconds} s)"
else
  echo "loss: skipped, nft (nftables) is missing; scripts/install-deps.sh installs it"
fi

[ $failed = 0 ] && echo "multihost: all passed" || echo "multihost: FAILED"
exit $failed
