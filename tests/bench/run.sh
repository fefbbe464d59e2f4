#!/usr/bin/env bash
# mara's benchmarks (docs/benchmarks.md): every figure there comes from this one command.
# Needs hyperfine (Debian: apt-get install hyperfine), python3, GNU time (/usr/bin/time) and rustc;
# the ledger part also PostgreSQL's server (Debian: apt-get install postgresql).
# Not part of `cargo test`: timings are measured here, never asserted in tests.
#
#   bash tests/bench/run.sh            # everything (about five minutes on 2 cores)
#   bash tests/bench/run.sh plan cost  # some parts: plan, cost, parallel, changed, startup, calls, ledger
#   MARA_BEFORE=/path/to/older/mara bash tests/bench/run.sh calls   # the calls part, before/after
set -euo pipefail
cd "$(dirname "$0")/../.."
parts=${*:-plan cost parallel changed startup calls ledger}
cargo build --release --workspace -q
MARA="$PWD/target/release/mara"
GENERATE_PY="$PWD/tests/bench/generate.py"
GENERATE="python3 $GENERATE_PY"
work=$(mktemp -d)
cleanup=()
trap 'for c in "${cleanup[@]}"; do eval "$c"; done; rm -rf "$work"' EXIT
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB; $(rustc --version)"

# The workspaces: the aws graph, then 100, 1,000 and 10,000 layered projects (seed 7).
"$MARA" -C "$work" show-execution --provider aws --format json > "$work/aws.json" 2>/dev/null || true
$GENERATE --shape "$work/aws.json" "$work/aws"
for n in 100 1000 10000; do $GENERATE "$n" "$work/$n"; done
sizes="aws 100 1000 10000"

# A pulumi that does no work (tests/bench/nowork.rs): it answers every call mara makes at once,
# with valid output, sleeps $NOWORK_SLEEP seconds in `up`, and logs its calls to $NOWORK_LOG.
mkdir -p "$work/nowork"
# Linked statically where the C library allows it: a process that starts in 0.8 ms, not 1.4.
rustc -O --edition 2021 -C target-feature=+crt-static -o "$work/nowork/pulumi" tests/bench/nowork.rs 2>/dev/null ||
  rustc -O --edition 2021 -o "$work/nowork/pulumi" tests/bench/nowork.rs
export PATH="$work/nowork:$PATH"

# Projects and edges of a workspace's plan, and its longest chain of dependent projects.
shape() {
  "$MARA" -C "$1" show-execution --format json | python3 -c '
import json, sys
plan = json.load(sys.stdin)["projects"]
depth = {}
for p in plan:  # in execution order: every dependency comes first
    depth[p["path"]] = 1 + max((depth[a] for a in p["after"]), default=0)
print(len(plan), sum(len(p["after"]) for p in plan), max(depth.values()))'
}

stat_ms() { python3 -c 'import json,sys; print("%.1f" % (json.load(open(sys.argv[1]))["results"][0][sys.argv[2]] * 1000))' "$1" "$2"; }
mean_ms() { stat_ms "$1" mean; }
stddev_ms() { stat_ms "$1" stddev; }
# Peak resident memory in MiB, the largest of three runs.
peak_mib() {
  local peak=0 kb
  for _ in 1 2 3; do
    /usr/bin/time -o "$work/time.txt" -f '%M' "$@" > /dev/null 2>&1 || true
    kb=$(tail -1 "$work/time.txt")
    [ "$kb" -gt "$peak" ] && peak=$kb
  done
  python3 -c "print(f'{$peak / 1024:.1f}')"
}

# --- 1. Planning at scale --------------------------------------------------------------------
if [[ " $parts " == *" plan "* ]]; then
  echo
  echo "## Planning: show-execution and validate"
  echo "| projects | edges | command | mean ± σ (ms) | peak memory (MiB) | ms per 1,000 (N log2 N + E) |"
  echo "|---|---|---|---|---|---|"
  for size in $sizes; do
    read -r n e _ < <(shape "$work/$size")
    for cmd in "show-execution" "show-execution --format json" "validate"; do
      hyperfine -N --warmup 2 --runs 15 --export-json "$work/h.json" "$MARA -C $work/$size $cmd" > /dev/null 2>&1 || true
      mem=$(peak_mib "$MARA" -C "$work/$size" $cmd)
      per=$(python3 -c "import math; print(f'{$(mean_ms "$work/h.json") / (($n * math.log2($n) + $e) / 1000):.3f}')")
      echo "| $n | $e | \`$cmd\` | $(mean_ms "$work/h.json") ± $(stddev_ms "$work/h.json") | $mem | $per |"
    done
  done
fi

# --- 2. Orchestration cost per project -------------------------------------------------------
# The same engine calls, made by mara (one project at a time) and by a plain shell loop.
loop_of() {
  local ws=$1
  echo '#!/bin/sh'
  echo 'set -e'
  for p in $("$MARA" -C "$ws" show-execution --format list); do
    echo "cd '$ws/$p'"
    echo "pulumi --non-interactive stack select --create --stack dev"
    echo "pulumi --non-interactive up --yes --skip-preview --stack dev --config-file '$ws/config/pulumi/Pulumi.dev.yaml' --color never --json > /dev/null"
    echo "pulumi --non-interactive stack output --json --show-secrets --stack dev > /dev/null"
  done
}
if [[ " $parts " == *" cost "* ]]; then
  echo
  echo "## Orchestration cost: mara up --parallel 1 against a shell loop making the same calls"
  echo "| projects | shell loop (ms) | mara (ms) | mara's own cost per project (ms) |"
  echo "|---|---|---|---|"
  for size in aws 1000; do
    read -r n _ _ < <(shape "$work/$size")
    loop_of "$work/$size" > "$work/loop-$size.sh"
    runs=$([ "$size" = aws ] && echo 30 || echo 5)
    hyperfine -N --warmup 2 --runs "$runs" --export-json "$work/loop.json" "sh $work/loop-$size.sh" > /dev/null
    hyperfine -N --warmup 2 --runs "$runs" --export-json "$work/mara.json" \
      "$MARA -C $work/$size up --yes --parallel 1 --color never -q" > /dev/null
    loop=$(mean_ms "$work/loop.json"); mara=$(mean_ms "$work/mara.json")
    echo "| $n | $loop ± $(stddev_ms "$work/loop.json") | $mara ± $(stddev_ms "$work/mara.json") | $(python3 -c "print(f'{($mara - $loop) / $n:.2f}')") |"
  done
fi

# --- 3. Parallel efficiency ------------------------------------------------------------------
# Every project's `up` takes the same fixed time; the wall time is compared with the critical
# path: the longest chain of dependent projects times one project's engine time, measured alone.
if [[ " $parts " == *" parallel "* ]]; then
  echo
  echo "## Parallel efficiency: wall time ÷ critical path"
  echo "| projects | longest chain | --parallel | one project (s) | critical path (s) | wall time (s) | ratio | in-run critical path (s) | ratio to it | mean start delay (ms) |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  export NOWORK_SLEEP=1
  cat > "$work/one.sh" <<SH
cd "$work/aws/infrastructure/aws/vpc"
pulumi --non-interactive stack select --create --stack dev
pulumi --non-interactive up --yes --skip-preview --stack dev --json > /dev/null
pulumi --non-interactive stack output --json --show-secrets --stack dev > /dev/null
SH
  hyperfine -N --warmup 1 --runs 10 --export-json "$work/one.json" "sh $work/one.sh" > /dev/null
  one=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["mean"])' "$work/one.json")
  for size in aws 1000; do
    read -r n _ chain < <(shape "$work/$size")
    parallel=$([ "$size" = aws ] && echo 16 || echo 128)
    runs=$([ "$size" = aws ] && echo 5 || echo 2)
    hyperfine -N --warmup 0 --runs "$runs" --export-json "$work/par.json" \
      "$MARA -C $work/$size up --yes --parallel $parallel --color never -q --report $work/report.json" > /dev/null
    "$MARA" -C "$work/$size" show-execution --format json > "$work/plan.json"
    # Also against the critical path of the durations the projects really had in the last run
    # (engines slow each other down when many start at once on few cores), and how long each
    # project waited between its last dependency's end and its own start: mara's own share.
    python3 - "$work/par.json" "$n" "$chain" "$one" "$parallel" "$work/plan.json" "$work/report.json" <<'PY'
import datetime, json, sys
r = json.load(open(sys.argv[1]))["results"][0]
n, chain, one, parallel = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
plan = json.load(open(sys.argv[6]))["projects"]
report = json.load(open(sys.argv[7]))
at = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
ran = {p["path"]: p for p in report["projects"]}
finish, delays = {}, []
for p in plan:
    finish[p["path"]] = ran[p["path"]]["duration_ms"] / 1000 + max((finish[a] for a in p["after"]), default=0)
    ready = max((at(ran[a]["finished"]) for a in p["after"]), default=at(report["started"]))
    delays.append(at(ran[p["path"]]["started"]) - ready)
in_run = max(finish.values())
wall = at(report["finished"]) - at(report["started"])
critical = chain * one
print(f"| {n} | {chain} | {parallel} | {one:.3f} | {critical:.2f} | {r['mean']:.2f} ± {r['stddev']:.2f} | {r['mean'] / critical:.3f} "
      f"| {in_run:.2f} | {wall / in_run:.3f} | {sum(delays) / len(delays) * 1000:.1f} |")
PY
  done
  unset NOWORK_SLEEP
fi

# --- 4. up --changed on an unchanged workspace -----------------------------------------------
if [[ " $parts " == *" changed "* ]]; then
  echo
  echo "## up --changed on an unchanged workspace"
  echo "| projects | mean ± σ (ms) | engine calls |"
  echo "|---|---|---|"
  for size in 1000; do
    read -r n _ _ < <(shape "$work/$size")
    "$MARA" -C "$work/$size" up --yes -q > /dev/null
    hyperfine -N --warmup 2 --runs 15 --export-json "$work/ch.json" \
      "$MARA -C $work/$size up --yes --changed -q" > /dev/null
    export NOWORK_LOG="$work/calls.log"
    : > "$NOWORK_LOG"
    "$MARA" -C "$work/$size" up --yes --changed -q > /dev/null
    calls=$(wc -l < "$NOWORK_LOG")
    unset NOWORK_LOG
    echo "| $n | $(mean_ms "$work/ch.json") ± $(stddev_ms "$work/ch.json") | $calls |"
  done
  # The same after a history of 300 runs: the first run's rows copied under 299 new run ids
  # (what 299 more full `up`s would leave; making them would take minutes).
  echo
  echo "## up --changed after a long history"
  echo "| projects | recorded runs | mean ± σ (ms) | peak memory (MiB) |"
  echo "|---|---|---|---|"
  for size in 1000; do
    read -r n _ _ < <(shape "$work/$size")
    rm -rf "$work/hist" && cp -r "$work/$size" "$work/hist"
    "$MARA" -C "$work/hist" up --yes -q > /dev/null
    for runs in 1 300; do
      [ "$runs" -gt 1 ] && python3 - "$work/hist/.mara/ledger.db" "$runs" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
(run,) = db.execute("SELECT run_id FROM runs ORDER BY started DESC LIMIT 1").fetchone()
def copy(table, new):
    cols = [c[1] for c in db.execute(f"PRAGMA table_info({table})")]
    picked = ", ".join("?" if c == "run_id" else c for c in cols)
    db.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {picked} FROM {table} WHERE run_id = ?", (new, run))
for k in range(int(sys.argv[2]) - 1):
    new = f"{run}-h{k:03}"
    copy("runs", new)
    copy("projects", new)
db.commit()
PY
      hyperfine -N --warmup 2 --runs 15 --export-json "$work/ch.json" \
        "$MARA -C $work/hist up --yes --changed -q" > /dev/null
      mem=$(peak_mib "$MARA" -C "$work/hist" up --yes --changed -q)
      echo "| $n | $runs | $(mean_ms "$work/ch.json") ± $(stddev_ms "$work/ch.json") | $mem |"
    done
  done
fi

# --- 5. Start-up -----------------------------------------------------------------------------
if [[ " $parts " == *" startup "* ]]; then
  echo
  echo "## Start-up"
  echo "| command | mean ± σ (ms) |"
  echo "|---|---|"
  for cmd in "--version" "show-execution --provider aws"; do
    hyperfine -N --warmup 5 --runs 50 --export-json "$work/s.json" "$MARA -C $work/aws $cmd" > /dev/null
    echo "| \`mara $cmd\` | $(mean_ms "$work/s.json") ± $(stddev_ms "$work/s.json") |"
  done
fi

# --- 6. Engine calls per project, and what they cost -----------------------------------------
# Calls counted with NOWORK_LOG on a fresh copy of the aws graph: the first run of each operation,
# then steady state. Then a no-change `up` with every call costing 0.5 s (a real CLI's start-up
# and backend), on the aws graph and on 100 projects; with MARA_BEFORE, an older mara beside it.
if [[ " $parts " == *" calls "* ]]; then
  echo
  echo "## Engine calls per project"
  echo "| mara | operation | first run | steady state |"
  echo "|---|---|---|---|"
  for bin in ${MARA_BEFORE:+"$MARA_BEFORE"} "$MARA"; do
    label=$([ "$bin" = "$MARA" ] && echo now || echo before)
    read -r n _ _ < <(shape "$work/aws")
    for op in "up --yes" "preview" "refresh" "destroy --yes"; do
      rm -rf "$work/calls-ws" && cp -r "$work/aws" "$work/calls-ws"
      counts=()
      # destroy and refresh need a deployed stack: an up first, not counted.
      case "$op" in refresh*|destroy*) "$bin" -C "$work/calls-ws" up --yes -q > /dev/null ;; esac
      for round in first steady; do
        export NOWORK_LOG="$work/calls.log"; : > "$NOWORK_LOG"
        "$bin" -C "$work/calls-ws" $op -q > /dev/null 2>&1 || true
        counts+=("$(python3 -c "print(f'{$(wc -l < "$NOWORK_LOG") / $n:.2f}')")")
        unset NOWORK_LOG
        case "$op" in destroy*) "$bin" -C "$work/calls-ws" up --yes -q > /dev/null ;; esac
      done
      echo "| $label | \`$op\` | ${counts[0]} | ${counts[1]} |"
    done
  done
  echo
  echo "## A no-change up with every engine call costing 0.5 s (--parallel 8)"
  echo "| mara | projects | wall time (s) |"
  echo "|---|---|---|"
  for bin in ${MARA_BEFORE:+"$MARA_BEFORE"} "$MARA"; do
    label=$([ "$bin" = "$MARA" ] && echo now || echo before)
    for size in aws 100; do
      read -r n _ _ < <(shape "$work/$size")
      rm -rf "$work/calls-ws" && cp -r "$work/$size" "$work/calls-ws"
      "$bin" -C "$work/calls-ws" up --yes -q > /dev/null
      export NOWORK_CALL_SLEEP=0.5
      hyperfine -N --runs 3 --export-json "$work/c.json" \
        "$bin -C $work/calls-ws up --yes --parallel 8 -q" > /dev/null
      unset NOWORK_CALL_SLEEP
      echo "| $label | $n | $(python3 -c "import json; r = json.load(open('$work/c.json'))['results'][0]; print(f\"{r['mean']:.2f} ± {r['stddev']:.2f}\")") |"
    done
  done
  echo
  echo "## Wall time ÷ critical path, every engine call costing a fixed time (--parallel 8)"
  echo "A first up's critical path is its longest chain of ups plus one stack select (the first"
  echo "project's); a steady up's, the chain of ups alone."
  echo "| mara | projects | longest chain | call (s) | run | critical path (s) | wall time (s) | ratio |"
  echo "|---|---|---|---|---|---|---|---|"
  for bin in ${MARA_BEFORE:+"$MARA_BEFORE"} "$MARA"; do
    label=$([ "$bin" = "$MARA" ] && echo now || echo before)
    for size in aws; do
      read -r n _ chain < <(shape "$work/$size")
      for call in 0.2 0.5; do
        for run in first steady; do
          export NOWORK_CALL_SLEEP=$call
          # A first run each time: a fresh copy before each of the three.
          fresh="rm -rf $work/calls-ws && cp -r $work/$size $work/calls-ws"
          prepare="bash -c '$fresh'"
          [ "$run" = steady ] && { eval "$fresh"; "$bin" -C "$work/calls-ws" up --yes -q > /dev/null; prepare=true; }
          hyperfine -N --runs 3 --prepare "$prepare" --export-json "$work/c.json" \
            "$bin -C $work/calls-ws up --yes --parallel 8 -q" > /dev/null
          unset NOWORK_CALL_SLEEP
          extra=$([ "$run" = first ] && echo "$call" || echo 0)
          critical=$(python3 -c "print(f'{$chain * $call + $extra:.2f}')")
          echo "| $label | $n | $chain | $call | $run | $critical | $(python3 -c "import json; r = json.load(open('$work/c.json'))['results'][0]; print(f\"{r['mean']:.2f} ± {r['stddev']:.2f} | {r['mean'] / $critical:.3f}\")") |"
        done
      done
    done
  done
fi

# --- 7. The ledger: PostgreSQL against SQLite ------------------------------------------------
# A PostgreSQL server of the script's own (initdb and pg_ctl on a directory under $work, on a
# loopback port, as the `postgres` user when run as root: the server refuses root), one database
# per workspace.
if [[ " $parts " == *" ledger "* ]]; then
  pg=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -x "$pg/initdb" ] || { echo "the ledger part needs PostgreSQL's server (apt-get install postgresql)" >&2; exit 1; }
  as=()
  if [ "$(id -u)" = 0 ]; then chmod 755 "$work"; mkdir -p "$work/pg"; chown postgres "$work/pg"; as=(runuser -u postgres --); fi
  mkdir -p "$work/pg"
  port=55433
  "${as[@]}" "$pg/initdb" -D "$work/pg/data" -A trust -U postgres > /dev/null
  "${as[@]}" "$pg/pg_ctl" -D "$work/pg/data" -w -l "$work/pg/log" \
    -o "-p $port -k $work/pg -c listen_addresses=127.0.0.1 -c max_connections=100" start > /dev/null
  cleanup+=("${as[*]} $pg/pg_ctl -D $work/pg/data -m immediate stop > /dev/null")
  psql() { "$pg/psql" -h 127.0.0.1 -p "$port" -U postgres -X -q -A -t "$@"; }
  url() { echo "postgres://postgres@127.0.0.1:$port/$1"; }

  echo
  echo "## The ledger's cost per project: mara up --parallel 1 on SQLite and on PostgreSQL (loopback)"
  echo "| projects | mara, SQLite (ms) | mara, PostgreSQL (ms) | PostgreSQL's extra per project (ms) | statements per project |"
  echo "|---|---|---|---|---|"
  for size in aws 1000; do
    read -r n _ _ < <(shape "$work/$size")
    db="ledger_$size"
    psql -c "CREATE DATABASE $db" > /dev/null
    runs=$([ "$size" = aws ] && echo 30 || echo 5)
    hyperfine -N --warmup 2 --runs "$runs" --export-json "$work/lite.json" \
      "$MARA -C $work/$size up --yes --parallel 1 --color never -q" > /dev/null
    export MARA_LEDGER_URL=$(url "$db")
    hyperfine -N --warmup 2 --runs "$runs" --export-json "$work/pg.json" \
      "$MARA -C $work/$size up --yes --parallel 1 --color never -q" > /dev/null
    # The statements the server ran for one more run, from its own log.
    psql -c "ALTER SYSTEM SET log_statement = 'all'" -c "SELECT pg_reload_conf()" > /dev/null
    lines=$(wc -l < "$work/pg/log")
    "$MARA" -C "$work/$size" up --yes --parallel 1 --color never -q > /dev/null
    statements=$(tail -n +"$((lines + 1))" "$work/pg/log" | grep -c 'LOG:  \(statement\|execute\)' || true)
    psql -c "ALTER SYSTEM RESET log_statement" -c "SELECT pg_reload_conf()" > /dev/null
    unset MARA_LEDGER_URL
    lite=$(mean_ms "$work/lite.json"); post=$(mean_ms "$work/pg.json")
    echo "| $n | $lite ± $(stddev_ms "$work/lite.json") | $post ± $(stddev_ms "$work/pg.json") | $(python3 -c "print(f'{($post - $lite) / $n:.2f} | {$statements / $n:.1f}')") |"
  done

  # Eight runs of one stack started at once, from eight copies of a one-project workspace (eight
  # machines) on the server, and from one workspace (one machine) on SQLite: how long each waits
  # for its ledger and for the lock's decision (mara's own debug lines), and how long a refused
  # run takes, start to exit. The winner's `up` takes a second, so every other run meets a lock.
  echo
  echo "## Lock acquisition with 8 contenders (20 rounds each)"
  echo "| ledger | opening the ledger, median / p95 (ms) | lock decided, median / p95 / max (ms) | refused run, start to exit, median / max (ms) | rounds with exactly one winner |"
  echo "|---|---|---|---|---|"
  python3 "$GENERATE_PY" 1 "$work/one" > /dev/null
  psql -c "CREATE DATABASE contention" > /dev/null
  for i in 1 2 3 4 5 6 7 8; do rm -rf "$work/one-$i" && cp -r "$work/one" "$work/one-$i"; done
  for ledger in postgres sqlite; do
    python3 - "$MARA" "$work" "$ledger" "$(url contention)" <<'PY'
import os, re, statistics, subprocess, sys, threading, time
mara, work, ledger, url = sys.argv[1:5]
opened, decided, refused, good = [], [], [], 0

def run(i, out):
    env = dict(os.environ, MARA_LOG="mara::ledger=debug", NOWORK_SLEEP="1")
    if ledger == "postgres":
        env["MARA_LEDGER_URL"] = url
    ws = f"{work}/one-{i}" if ledger == "postgres" else f"{work}/one"
    started = time.monotonic()
    p = subprocess.run([mara, "-C", ws, "up", "--yes", "--color", "never"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out[i] = (p.returncode, p.stderr, (time.monotonic() - started) * 1000)

for _ in range(20):
    out = {}
    threads = [threading.Thread(target=run, args=(i, out)) for i in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = 0
    for code, err, ms in out.values():
        opened += [int(m) / 1000 for m in re.findall(r"ledger opened micros=(\d+)", err)]
        for micros, taken in re.findall(r"lock decided micros=(\d+) taken=(true|false)", err):
            decided.append(int(micros) / 1000)
            winners += taken == "true"
        if code == 5:
            refused.append(ms)
    good += winners == 1
q = lambda xs, f: sorted(xs)[min(len(xs) - 1, int(f * len(xs)))]
print(f"| {'PostgreSQL, 8 copies' if ledger == 'postgres' else 'SQLite, one workspace'} "
      f"| {statistics.median(opened):.2f} / {q(opened, 0.95):.2f} "
      f"| {statistics.median(decided):.2f} / {q(decided, 0.95):.2f} / {max(decided):.2f} "
      f"| {statistics.median(refused):.1f} / {max(refused):.1f} | {good} of 20 |")
PY
  done
fi
