#!/usr/bin/env bash
# mara's benchmarks (docs/benchmarks.md): every figure there comes from this one command, printed
# as the tables the doc shows. Each figure is a median over interleaved rounds (every command of a
# table once per round, in turned order; one warm-up round not counted), with its min–max, beside
# its reference: a shell loop making the same engine calls, make (and ninja) running the same
# graph, SQLite beside PostgreSQL.
# Needs python3, GNU time (/usr/bin/time), strace and rustc; the ledger part PostgreSQL's server
# (Debian: apt-get install postgresql). Not part of `cargo test`: timings are measured here, never
# asserted in tests.
#
#   bash tests/bench/run.sh            # everything (about ten minutes on 2 cores)
#   bash tests/bench/run.sh plan cost  # some parts: plan, cost, pertask, parallel, changed, startup, calls, ledger, history, policy
#   ROUNDS=3 bash tests/bench/run.sh   # fewer rounds (a quick look; the doc's figures use the default)
#   MARA_BEFORE=/path/to/older/mara bash tests/bench/run.sh calls   # the calls (or history) part, before/after
set -euo pipefail
cd "$(dirname "$0")/../.."
parts=${*:-plan cost pertask parallel changed startup calls ledger history policy}
ROUNDS=${ROUNDS:-7}
cargo build --release --workspace -q
MARA="$PWD/target/release/mara"
GENERATE_PY="$PWD/tests/bench/generate.py"
GENERATE="python3 $GENERATE_PY"
ROUNDS_PY="$PWD/tests/bench/rounds.py"
work=$(mktemp -d)
cleanup=()
trap 'for c in "${cleanup[@]}"; do eval "$c"; done; rm -rf "$work"' EXIT
echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(free -g | awk '/Mem:/ {print $2}') GiB; $(rustc --version); $(date -u +%F)"

# The workspaces: the aws graph, then 100, 1,000 and 10,000 layered projects (seed 7), and 100
# projects in 10 strict layers of 10 (each after projects of the layer just before).
"$MARA" -C "$work" show-execution --provider aws --format json > "$work/aws.json" 2>/dev/null || true
$GENERATE --shape "$work/aws.json" "$work/aws"
for n in 100 1000 10000; do $GENERATE "$n" "$work/$n"; done
$GENERATE 100 "$work/layers10" --layers 10 --strict
$GENERATE 100 "$work/skip10" --layers 10
$GENERATE 1000 "$work/width50" --layers 20
sizes="aws 100 1000 10000"

# A pulumi that does no work (tests/bench/nowork.rs): it answers every call mara makes at once,
# with valid output, sleeps $NOWORK_SLEEP seconds in `up`, and logs its calls to $NOWORK_LOG.
mkdir -p "$work/nowork"
# Linked statically where the C library allows it: a process that starts in 0.8 ms, not 1.4.
rustc -O --edition 2021 -C target-feature=+crt-static -o "$work/nowork/pulumi" tests/bench/nowork.rs 2>/dev/null ||
  rustc -O --edition 2021 -o "$work/nowork/pulumi" tests/bench/nowork.rs
export PATH="$work/nowork:$PATH"
# Every workspace's stacks exist, as in steady state (the first up creates them).
for size in $sizes layers10 skip10 width50; do "$MARA" -C "$work/$size" up --yes -q > /dev/null; done

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

# rounds N: the spec (JSON, on stdin) measured in N interleaved rounds, into $work/r.json.
rounds() { python3 "$ROUNDS_PY" "$1" > "$work/r.json"; }
# ms LABEL: "median [min–max]" of a command of the last rounds; med LABEL: the median alone.
ms() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))[sys.argv[2]]; print("%.1f [%.1f–%.1f]" % (r["median"], r["min"], r["max"]))' "$work/r.json" "$1"; }
med() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]]["median"])' "$work/r.json" "$1"; }
calc() { python3 -c "print(f'{$1:$2}')"; }
# Peak resident memory in MiB, the largest of three runs.
peak_mib() {
  local peak=0 kb
  for _ in 1 2 3; do
    /usr/bin/time -o "$work/time.txt" -f '%M' "$@" > /dev/null 2>&1 || true
    kb=$(tail -1 "$work/time.txt")
    [ "$kb" -gt "$peak" ] && peak=$kb
  done
  calc "$peak / 1024" .1f
}
# The system calls a command makes, all threads.
syscalls() { strace -f -c -o "$work/sc.txt" "$@" > /dev/null 2>&1 || true; awk '/total/ {print $4}' "$work/sc.txt"; }

# --- 1. Planning at scale --------------------------------------------------------------------
if [[ " $parts " == *" plan "* ]]; then
  echo
  echo "## Planning: show-execution, validate, up --dry-run"
  echo "| projects | edges | command | median [min–max] (ms) | peak memory (MiB) |"
  echo "|---|---|---|---|---|"
  commands=("show-execution" "show-execution --format list" "show-execution --format dot" "show-execution --format mermaid" "show-execution --format json" "validate" "up --dry-run")
  for size in $sizes; do
    read -r n e _ < <(shape "$work/$size")
    python3 -c 'import json,sys; print(json.dumps([{"label": c, "sh": f"{sys.argv[1]} -C {sys.argv[2]} {c}"} for c in sys.argv[3:]]))' \
      "$MARA" "$work/$size" "${commands[@]}" | rounds "$ROUNDS"
    for cmd in "${commands[@]}"; do
      echo "| $n | $e | \`$cmd\` | $(ms "$cmd") | $(peak_mib "$MARA" -C "$work/$size" $cmd) |"
    done
  done
  # What reading the projects' files costs the kernel: the JSON plan reads every Pulumi.yaml, the
  # tree none; the difference, per project.
  read -r n _ _ < <(shape "$work/10000")
  json=$(syscalls "$MARA" -C "$work/10000" show-execution --format json)
  tree=$(syscalls "$MARA" -C "$work/10000" show-execution)
  validate=$(syscalls "$MARA" -C "$work/10000" validate)
  echo
  echo "System calls per Pulumi.yaml read (10,000 projects, \`show-execution --format json\` against the tree): $(calc "($json - $tree) / $n" .2f)"
  echo "System calls per project of \`validate\` (10,000 projects: each Pulumi.yaml read, each project's files walked), beyond the tree's: $(calc "($validate - $tree) / $n" .2f)"
fi

# --- 2. Orchestration cost per project -------------------------------------------------------
# The same engine calls (one `up` per project, as mara makes in steady state), made by mara one
# project at a time, by a plain shell loop, and by make (and ninja, where installed) given the
# same graph and one job.
if [[ " $parts " == *" cost "* ]]; then
  echo
  echo "## Orchestration cost: mara up --parallel 1 against a shell loop, make and ninja making the same calls"
  echo "| projects | tool | median [min–max] (ms) | cost per project beyond the loop (ms) |"
  echo "|---|---|---|---|"
  for size in aws 1000; do
    ws="$work/$size"
    read -r n _ _ < <(shape "$ws")
    up="pulumi --non-interactive up --yes --skip-preview --stack dev --config-file '$ws/config/pulumi/Pulumi.dev.yaml' --color never --json > /dev/null"
    "$MARA" -C "$ws" show-execution --format json > "$work/plan.json"
    python3 - "$work/plan.json" "$ws" "$up" "$work/loop-$size.sh" "$work/Makefile-$size" "$work/build-$size.ninja" <<'PY'
import json, sys
plan, ws, up = json.load(open(sys.argv[1]))["projects"], sys.argv[2], sys.argv[3]
t = lambda p: p["path"].replace("/", "_")
with open(sys.argv[4], "w") as f:
    f.write("#!/bin/sh\nset -e\n" + "".join(f"cd '{ws}/{p['path']}' && {up}\n" for p in plan))
with open(sys.argv[5], "w") as f:
    f.write(".PHONY: all " + " ".join(t(p) for p in plan) + "\nall: " + " ".join(t(p) for p in plan) + "\n")
    for p in plan:
        f.write(f"{t(p)}: {' '.join(a.replace('/', '_') for a in p['after'])}\n\tcd '{ws}/{p['path']}' && {up}\n")
with open(sys.argv[6], "w") as f:
    f.write("rule up\n  command = cd $dir && " + up.replace("$", "$$") + "\n")
    for p in plan:
        deps = " ".join("phony_" + a.replace("/", "_") for a in p["after"])
        f.write(f"build phony_{t(p)}: up" + (f" || {deps}" if deps else "") + f"\n  dir = {ws}/{p['path']}\n")
PY
    spec="[{\"label\": \"loop\", \"sh\": \"sh $work/loop-$size.sh\"}, {\"label\": \"mara\", \"sh\": \"$MARA -C $ws up --yes --parallel 1 --color never -q\"}, {\"label\": \"make\", \"sh\": \"make -s -j1 -f $work/Makefile-$size all\"}"
    command -v ninja > /dev/null && spec="$spec, {\"label\": \"ninja\", \"sh\": \"rm -f $work/.ninja_log && ninja -j1 -f $work/build-$size.ninja -C $work > /dev/null\"}"
    echo "$spec]" | rounds "$([ "$size" = aws ] && echo $((ROUNDS * 3)) || echo "$ROUNDS")"
    loop=$(med loop)
    for tool in loop mara make ninja; do
      python3 -c 'import json,sys; sys.exit(sys.argv[2] not in json.load(open(sys.argv[1])))' "$work/r.json" "$tool" || continue
      echo "| $n | $tool | $(ms $tool) | $([ $tool = loop ] && echo — || calc "($(med $tool) - $loop) / $n" .2f) |"
    done
  done
fi

# --- 2b. Per task, 8 at a time, against make ---------------------------------------------------
# 1,000 projects in 20 layers of 50, 8 jobs: mara up --parallel 8, make -j8 executing the engine
# directly (a recipe without shell syntax: make execs it itself), make -j8 with shell recipes
# (`cd DIR && … > /dev/null`: a shell per task), and ninja -j8 where installed. Wall time per
# task, the CPU of the whole tree per task (GNU time's user + system, the engines' included), and
# the system calls per task each tool makes of its own (strace -f -c of the whole tree, less the
# engine's own calls: one engine process's count, times the tasks).
if [[ " $parts " == *" pertask "* ]]; then
  echo
  echo "## Per task, 8 at a time: 1,000 projects in 20 layers of 50"
  echo "| tool | median [min–max] (ms) | per task (ms) | CPU per task (ms) | own system calls per task |"
  echo "|---|---|---|---|---|"
  ws="$work/width50"
  "$MARA" -C "$ws" show-execution --format json > "$work/plan.json"
  common="--non-interactive up --yes --skip-preview --stack dev --config-file $ws/config/pulumi/Pulumi.dev.yaml --color never --json"
  python3 - "$work/plan.json" "$ws" "$common" "$work" <<'PY'
import json, sys
plan, ws, common, work = json.load(open(sys.argv[1]))["projects"], sys.argv[2], sys.argv[3], sys.argv[4]
t = lambda p: p.replace("/", "_")
head = ".PHONY: all " + " ".join(t(p["path"]) for p in plan) + "\nall: " + " ".join(t(p["path"]) for p in plan) + "\n"
recipes = {
    # No shell syntax: make forks and execs pulumi itself (its output goes where make's does).
    "direct": lambda p: f"pulumi --cwd {ws}/{p} {common}",
    "shell": lambda p: f"cd '{ws}/{p}' && pulumi {common} > /dev/null",
}
for name, recipe in recipes.items():
    with open(f"{work}/Makefile-{name}", "w") as f:
        f.write(head + "".join(f"{t(p['path'])}: {' '.join(t(a) for a in p['after'])}\n\t{recipe(p['path'])}\n" for p in plan))
with open(f"{work}/build-width50.ninja", "w") as f:
    f.write(f"rule up\n  command = pulumi --cwd $dir {common}\n")
    for p in plan:
        deps = " ".join("phony_" + t(a) for a in p["after"])
        f.write(f"build phony_{t(p['path'])}: up" + (f" || {deps}" if deps else "") + f"\n  dir = {ws}/{p['path']}\n")
PY
  tools=(mara "make (direct exec)" "make (shell recipes)")
  spec="[{\"label\": \"mara\", \"sh\": \"$MARA -C $ws up --yes --parallel 8 --color never -q\"},
         {\"label\": \"make (direct exec)\", \"sh\": \"make -s -j8 -f $work/Makefile-direct all > /dev/null\"},
         {\"label\": \"make (shell recipes)\", \"sh\": \"make -s -j8 -f $work/Makefile-shell all\"}"
  if command -v ninja > /dev/null; then
    tools+=(ninja)
    spec="$spec, {\"label\": \"ninja\", \"sh\": \"rm -f $work/.ninja_log && ninja -j8 -f $work/build-width50.ninja -C $work > /dev/null\"}"
  fi
  echo "$spec]" | rounds "$ROUNDS"
  command_of() {
    case "$1" in
      mara) echo "$MARA -C $ws up --yes --parallel 8 --color never -q" ;;
      "make (direct exec)") echo "make -s -j8 -f $work/Makefile-direct all" ;;
      "make (shell recipes)") echo "make -s -j8 -f $work/Makefile-shell all" ;;
      ninja) echo "ninja -j8 -f $work/build-width50.ninja -C $work" ;;
    esac
  }
  # One engine process's own system calls.
  first=$("$MARA" -C "$ws" show-execution --format list | head -1)
  engine=$(cd "$ws/$first" && syscalls pulumi $common)
  for tool in "${tools[@]}"; do
    # CPU: the least of three runs (what the host's other work adds is never less).
    cpu=$(for _ in 1 2 3; do rm -f "$work/.ninja_log"; /usr/bin/time -o "$work/time.txt" -f '%U %S' $(command_of "$tool") > /dev/null 2>&1; awk '{print ($1 + $2) * 1000}' "$work/time.txt"; done | sort -n | head -1)
    rm -f "$work/.ninja_log"
    calls=$(syscalls $(command_of "$tool"))
    echo "| $tool | $(ms "$tool") | $(calc "$(med "$tool") / 1000" .3f) | $(calc "$cpu / 1000" .3f) | $(calc "$calls / 1000 - $engine" .1f) |"
  done
  echo
  echo "One engine process makes $engine system calls of its own (not counted above)."
fi

# --- 3. Parallel efficiency ------------------------------------------------------------------
# Every project's `up` takes the same time; the wall time against the critical path: the longest
# chain of dependent projects times one project's engine time, measured alone (a shell running
# the same call). 100 projects in 10 strict layers of 10 at --parallel 10 (every layer at once),
# and the aws graph at --parallel 16.
if [[ " $parts " == *" parallel "* ]]; then
  echo
  echo "## Parallel efficiency: wall time ÷ critical path (every up 0.2 s)"
  echo "| workspace | projects | longest chain | --parallel | one project (ms) | critical path (ms) | wall time (ms) | ratio |"
  echo "|---|---|---|---|---|---|---|---|"
  export NOWORK_SLEEP=0.2
  for size in layers10 skip10 aws; do
    read -r n _ chain < <(shape "$work/$size")
    parallel=$([ "$size" = aws ] && echo 16 || echo 10)
    first=$("$MARA" -C "$work/$size" show-execution --format list | head -1)
    echo "[{\"label\": \"one\", \"sh\": \"cd $work/$size/$first && pulumi --non-interactive up --yes --skip-preview --stack dev --json > /dev/null\"},
           {\"label\": \"mara\", \"sh\": \"$MARA -C $work/$size up --yes --parallel $parallel --color never -q\"}]" | rounds "$ROUNDS"
    one=$(med one); critical=$(calc "$chain * $one" .1f)
    echo "| $size | $n | $chain | $parallel | $(ms one) | $critical | $(ms mara) | $(calc "$(med mara) / $critical" .3f) |"
  done
  unset NOWORK_SLEEP
fi

# --- 4. up --changed on an unchanged workspace -----------------------------------------------
if [[ " $parts " == *" changed "* ]]; then
  echo
  echo "## up --changed on an unchanged workspace (1,000 projects, after an up)"
  echo "| recorded runs | median [min–max] (ms) | peak memory (MiB) | engine calls |"
  echo "|---|---|---|---|"
  rm -rf "$work/hist" && cp -r "$work/1000" "$work/hist"
  "$MARA" -C "$work/hist" up --yes -q > /dev/null
  for runs in 1 300; do
    # 300: the last run's rows copied under 299 new run ids (what 299 more full `up`s leave).
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
    echo "[{\"label\": \"changed\", \"sh\": \"$MARA -C $work/hist up --yes --changed -q\"}]" | rounds "$ROUNDS"
    export NOWORK_LOG="$work/calls.log"; : > "$NOWORK_LOG"
    "$MARA" -C "$work/hist" up --yes --changed -q > /dev/null
    calls=$(wc -l < "$NOWORK_LOG"); unset NOWORK_LOG
    echo "| $(($(python3 -c "import sqlite3; print(sqlite3.connect('$work/hist/.mara/ledger.db').execute('SELECT COUNT(*) FROM runs').fetchone()[0])"))) | $(ms changed) | $(peak_mib "$MARA" -C "$work/hist" up --yes --changed -q) | $calls |"
  done
fi

# --- 5. Start-up -----------------------------------------------------------------------------
if [[ " $parts " == *" startup "* ]]; then
  echo
  echo "## Start-up"
  echo "| command | median [min–max] (ms) |"
  echo "|---|---|"
  echo "[{\"label\": \"--version\", \"sh\": \"$MARA --version\"}, {\"label\": \"show-execution --provider aws\", \"sh\": \"$MARA -C $work/aws show-execution --provider aws\"}]" | rounds $((ROUNDS * 5))
  for cmd in "--version" "show-execution --provider aws"; do echo "| \`mara $cmd\` | $(ms "$cmd") |"; done
fi

# --- 6. Engine calls per project, and what they cost -----------------------------------------
# Calls counted with NOWORK_LOG on a fresh copy of the aws graph: the first run of each operation,
# then steady state. Then a no-change `up --parallel 8` with every call costing 0.5 s (a real
# CLI's start-up and backend), on the aws graph and on 100 projects; with MARA_BEFORE, an older
# mara beside it.
if [[ " $parts " == *" calls "* ]]; then
  echo
  echo "## Engine calls per project"
  echo "| mara | operation | first run | steady state |"
  echo "|---|---|---|---|"
  for bin in ${MARA_BEFORE:+"$MARA_BEFORE"} "$MARA"; do
    label=$([ "$bin" = "$MARA" ] && echo now || echo before)
    read -r n _ _ < <(shape "$work/aws")
    for op in "up --yes" "preview" "refresh" "destroy --yes"; do
      rm -rf "$work/calls-ws" && $GENERATE --shape "$work/aws.json" "$work/calls-ws"
      counts=()
      # destroy and refresh need a deployed stack: an up first, not counted.
      case "$op" in refresh*|destroy*) "$bin" -C "$work/calls-ws" up --yes -q > /dev/null ;; esac
      for round in first steady; do
        export NOWORK_LOG="$work/calls.log"; : > "$NOWORK_LOG"
        "$bin" -C "$work/calls-ws" $op -q > /dev/null 2>&1 || true
        counts+=("$(calc "$(wc -l < "$NOWORK_LOG") / $n" .2f)")
        unset NOWORK_LOG
        case "$op" in destroy*) "$bin" -C "$work/calls-ws" up --yes -q > /dev/null ;; esac
      done
      echo "| $label | \`$op\` | ${counts[0]} | ${counts[1]} |"
    done
  done
  echo
  echo "## A no-change up with every engine call costing 0.5 s (--parallel 8)"
  echo "| mara | projects | longest chain | calls on it (s) | median [min–max] (ms) |"
  echo "|---|---|---|---|---|"
  export NOWORK_CALL_SLEEP=0.5
  for bin in ${MARA_BEFORE:+"$MARA_BEFORE"} "$MARA"; do
    label=$([ "$bin" = "$MARA" ] && echo now || echo before)
    for size in aws 100; do
      read -r n _ chain < <(shape "$work/$size")
      echo "[{\"label\": \"up\", \"sh\": \"$bin -C $work/$size up --yes --parallel 8 -q\"}]" | rounds 3
      echo "| $label | $n | $chain | $(calc "$chain * 0.5" .1f) | $(ms up) |"
    done
  done
  unset NOWORK_CALL_SLEEP
fi

# --- 7. The ledger: PostgreSQL against SQLite ------------------------------------------------
# A PostgreSQL server of the script's own, with its default settings (initdb and pg_ctl on a
# directory under $work, a loopback port, as the `postgres` user when run as root: the server
# refuses root), one database per workspace.
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
  echo "PostgreSQL $(psql -c 'SHOW server_version'), default settings: synchronous_commit $(psql -c 'SHOW synchronous_commit'), fsync $(psql -c 'SHOW fsync'), shared_buffers $(psql -c 'SHOW shared_buffers'); on loopback, on the same 2 cores."
  echo
  echo "## The ledger: mara up on SQLite and on PostgreSQL (loopback)"
  echo "| projects | --parallel | SQLite, median [min–max] (ms) | PostgreSQL, median [min–max] (ms) | PostgreSQL ÷ SQLite | PostgreSQL's extra per project (ms) | statements per project |"
  echo "|---|---|---|---|---|---|---|"
  for size in aws 1000; do
    read -r n _ _ < <(shape "$work/$size")
    db="ledger_$size"
    psql -c "CREATE DATABASE $db" > /dev/null
    MARA_LEDGER_URL=$(url "$db") "$MARA" -C "$work/$size" up --yes -q > /dev/null
    spec="["
    for p in 1 8; do
      spec="$spec{\"label\": \"sqlite $p\", \"sh\": \"$MARA -C $work/$size up --yes --parallel $p --color never -q\"},"
      spec="$spec{\"label\": \"postgres $p\", \"sh\": \"$MARA -C $work/$size up --yes --parallel $p --color never -q\", \"env\": {\"MARA_LEDGER_URL\": \"$(url "$db")\"}},"
    done
    echo "${spec%,}]" | rounds "$([ "$size" = aws ] && echo $((ROUNDS * 3)) || echo "$ROUNDS")"
    for p in 1 8; do
      # The statements the server ran for one more run, from its own log.
      psql -c "ALTER SYSTEM SET log_statement = 'all'" -c "SELECT pg_reload_conf()" > /dev/null
      lines=$(wc -l < "$work/pg/log")
      MARA_LEDGER_URL=$(url "$db") "$MARA" -C "$work/$size" up --yes --parallel $p --color never -q > /dev/null
      statements=$(tail -n +"$((lines + 1))" "$work/pg/log" | grep -c 'LOG:  \(statement\|execute\)' || true)
      psql -c "ALTER SYSTEM RESET log_statement" -c "SELECT pg_reload_conf()" > /dev/null
      lite=$(med "sqlite $p"); post=$(med "postgres $p")
      echo "| $n | $p | $(ms "sqlite $p") | $(ms "postgres $p") | $(calc "$post / $lite" .2f) | $(calc "($post - $lite) / $n" .2f) | $(calc "$statements / $n" .1f) |"
    done
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

# --- 8. The ledger's history: status, history and mara serve's pages ------------------------
# 100 projects: ten real `up`s, then their rows copied under 4,990 older run ids (what 4,990 more
# runs leave: ups, refreshes and drift checks of stack dev, a run a minute). Each command timed in
# interleaved rounds, `/` and `/stacks` fetched with curl from one `mara serve` (curl's own few
# milliseconds included); the peak memory of the JSON history. With MARA_BEFORE, an older mara
# beside it, on a workspace and ledger of its own, filled the same way.
if [[ " $parts " == *" history "* ]]; then
  command -v curl > /dev/null || { echo "the history part needs curl" >&2; exit 1; }
  echo
  echo "## The ledger's history: status, history and mara serve at 10 and 5,000 recorded runs (100 projects)"
  echo "| mara | recorded runs | command | median [min–max] (ms) | peak memory (MiB) |"
  echo "|---|---|---|---|---|"
  for bin in ${MARA_BEFORE:+"$MARA_BEFORE"} "$MARA"; do
    label=$([ "$bin" = "$MARA" ] && echo now || echo before)
    ws="$work/history-$label"
    rm -rf "$ws" && $GENERATE 100 "$ws" > /dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do "$bin" -C "$ws" up --yes -q > /dev/null; done
    for runs in 10 5000; do
      # The ten runs' rows (a run and its projects) copied, in turn, under older ids.
      [ "$runs" -gt 10 ] && python3 - "$ws/.mara/ledger.db" "$runs" <<'PY'
import datetime, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
real = db.execute("SELECT run_id, started FROM runs ORDER BY started").fetchall()
first = datetime.datetime.fromisoformat(real[0][1].replace("Z", "+00:00"))
columns = lambda table: [c[1] for c in db.execute(f"PRAGMA table_info({table})")]
runs, projects = columns("runs"), columns("projects")
for k in range(int(sys.argv[2]) - len(real)):
    at = first - datetime.timedelta(minutes=k + 1)
    new = at.strftime("%Y%m%d-%H%M%S") + f"-{k:06x}"
    source = real[k % len(real)][0]
    fixed = {"run_id": new, "operation": ["up", "refresh", "drift"][k % 3],
             "started": at.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
             "finished": (at + datetime.timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%S.000Z")}
    picked = ", ".join("?" if c in fixed else c for c in runs)
    db.execute(f"INSERT INTO runs ({', '.join(runs)}) SELECT {picked} FROM runs WHERE run_id = ?",
               [fixed[c] for c in runs if c in fixed] + [source])
    picked = ", ".join("?" if c == "run_id" else c for c in projects)
    db.execute(f"INSERT INTO projects ({', '.join(projects)}) SELECT {picked} FROM projects WHERE run_id = ?",
               (new, source))
db.commit()
PY
      "$bin" -C "$ws" serve --listen 127.0.0.1:0 2> "$work/serve.log" &
      serve=$!
      cleanup+=("kill $serve 2> /dev/null || true")
      port=
      for _ in $(seq 100); do
        port=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/serve.log" | head -1 | cut -d: -f3) || true
        [ -n "$port" ] && break
        sleep 0.05
      done
      [ -n "$port" ] || { echo "mara serve did not start: $(cat "$work/serve.log")" >&2; exit 1; }
      url="http://127.0.0.1:$port"
      python3 -c 'import json,sys; m, ws, url = sys.argv[1:]; print(json.dumps([
        {"label": "history", "sh": f"{m} -C {ws} history"},
        {"label": "history --limit 1000 --output json", "sh": f"{m} -C {ws} history --limit 1000 --output json"},
        {"label": "status", "sh": f"{m} -C {ws} status"},
        {"label": "GET /", "sh": f"curl -sf -o /dev/null {url}/"},
        {"label": "GET /stacks", "sh": f"curl -sf -o /dev/null {url}/stacks"}]))' "$bin" "$ws" "$url" | rounds "$ROUNDS"
      for cmd in "history" "history --limit 1000 --output json" "status" "GET /" "GET /stacks"; do
        case "$cmd" in
          GET*) peak="—" ;;
          *) peak=$(peak_mib "$bin" -C "$ws" $cmd) ;;
        esac
        echo "| $label | $runs | \`$cmd\` | $(ms "$cmd") | $peak |"
      done
      kill "$serve" && wait "$serve" 2> /dev/null || true
    done
  done
fi

# --- 9. Policies: what the gate adds to a preview of 1,000 projects -------------------------
# The same preview of width50 (1,000 projects, --parallel 8) without policies and with a
# per-project package (three rules over each Pulumi digest) and a deployment package (three
# rules over the whole run); and the deployment's policies alone on a 1,000-project input
# (`mara policy eval --deployment`: compiled, checked over an empty input, evaluated).
if [[ " $parts " == *" policy "* ]]; then
  echo
  echo "## Policies at 1,000 projects"
  gated="$work/width50-policy"
  cp -r "$work/width50" "$gated"
  mkdir -p "$gated/policy"
  cat > "$gated/policy/main.rego" <<'REGO'
package main

import rego.v1

deny contains msg if {
	some step in input.steps
	step.op == "replace"
	msg := sprintf("%s would be replaced", [step.urn])
}

deny_untagged contains msg if {
	some step in input.steps
	step.op == "create"
	not step.newState.inputs.tags.owner
	msg := sprintf("%s has no owner", [step.urn])
}

warn contains msg if {
	input.changeSummary.create > 10
	msg := sprintf("%s creates %d resources", [input.mara.project, input.changeSummary.create])
}
REGO
  cat > "$gated/policy/deployment.rego" <<'REGO'
package deployment

import rego.v1

deny contains msg if {
	some p in input.projects
	p.deferred
	msg := sprintf("%s was not previewed", [p.path])
}

deny_replace_under contains msg if {
	some p in input.projects
	some r in p.resources
	r.action == "replace"
	some q in input.projects
	p.path in q.after
	msg := sprintf("%s replaces %s under %s", [p.path, r.resource, q.path])
}

warn contains msg if {
	n := count([p | some p in input.projects; p.status != "succeeded"])
	n > 0
	msg := sprintf("%d projects not previewed", [n])
}
REGO
  "$MARA" -C "$gated" preview --parallel 8 --output json > "$work/gated.json" 2> /dev/null || true
  python3 - "$work/gated.json" "$work/deployment-1000.json" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
assert "policy" in summary, "the gated preview was not judged"
projects = [{"path": p["path"], "engine": "pulumi", "after": [], "status": "succeeded",
             "changes": {"create": 1, "same": 1},
             "resources": [{"resource": "aws:s3/bucket:Bucket (logs)", "action": "create", "properties": []}],
             "changed_outputs": [], "new_stack": False, "stale": [], "waits_on": [], "planned_with": None,
             "deferred": False, "inputs": {}, "projected": []} for p in summary["projects"]]
json.dump({"operation": "preview", "stack": "dev", "provider": "synthetic", "run_id": "r", "who": "a@b",
           "fanned_out": False, "projects": projects, "orphans": []}, open(sys.argv[2], "w"))
PY
  echo "| run | median [min–max] (ms) |"
  echo "|---|---|"
  echo "[{\"label\": \"preview\", \"sh\": \"$MARA -C $work/width50 preview --parallel 8 -q\"},
         {\"label\": \"preview with policies\", \"sh\": \"$MARA -C $gated preview --parallel 8 -q\"},
         {\"label\": \"policy eval --deployment\", \"sh\": \"$MARA -C $gated policy eval --deployment $work/deployment-1000.json > /dev/null\"}]" | rounds "$ROUNDS"
  for label in "preview" "preview with policies" "policy eval --deployment"; do
    echo "| \`mara $label\` | $(ms "$label") |"
  done
  # The gate's own time, as the run logs it: compiled once, then 1,000 project inputs and one
  # deployment input judged (the median of the rounds' runs).
  for i in $(seq "$ROUNDS"); do
    MARA_LOG=mara=debug "$MARA" -C "$gated" preview --parallel 8 -q 2>&1 > /dev/null |
      sed -n 's/.*policies \(compiled\|judged\).*micros=\([0-9]*\).*/\1 \2/p'
  done > "$work/gate.txt"
  python3 - "$work/gate.txt" <<'PY'
import statistics, sys
times = {}
for line in open(sys.argv[1]):
    what, micros = line.split()
    times.setdefault(what, []).append(int(micros) / 1000)
print()
print("| step of the gate | median [min–max] (ms) |")
print("|---|---|")
for what, label in (("compiled", "compiling the policies (once a run)"), ("judged", "judging 1,000 projects and the deployment")):
    t = times[what]
    print(f"| {label} | {statistics.median(t):.1f} [{min(t):.1f}–{max(t):.1f}] |")
PY
fi

