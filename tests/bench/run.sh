#!/usr/bin/env bash
# mara's run benchmarks (docs/benchmarks.md): its own cost per project, and parallel efficiency.
# Needs hyperfine (Debian: apt-get install hyperfine) and python3. Not part of `cargo test`.
#
#   bash tests/bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --workspace -q
MARA="$PWD/target/release/mara"
STAND_IN_DIR="$PWD/target/release"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- 1. Orchestration cost per project -------------------------------------------------------
# A pulumi that does no work: it answers every call mara makes at once, with valid output.
mkdir -p "$work/nowork"
cat > "$work/nowork/pulumi" <<'SH'
#!/bin/sh
for word in "$@"; do
  case "$word" in
    output) echo '{"kubeconfig":{"apiVersion":"v1","kind":"Config","clusters":[],"users":[],"contexts":[]}}'; exit 0 ;;
    up|refresh|destroy) echo '{"sequence":0,"timestamp":0,"summaryEvent":{"resourceChanges":{"same":1},"durationSeconds":0,"result":"succeeded"}}'; exit 0 ;;
  esac
done
exit 0
SH
chmod +x "$work/nowork/pulumi"
cp -r examples/mara-local "$work/ws1"
rm -rf "$work/ws1/.mara"
projects=$(PATH="$work/nowork:$PATH" "$MARA" -C "$work/ws1" show-execution --format list)
count=$(echo "$projects" | wc -l)
shared="$work/ws1/config/pulumi/Pulumi.dev.yaml"
# The same engine calls, made by a plain shell loop, one after the other.
{
  echo '#!/bin/sh'
  echo 'set -e'
  for p in $projects; do
    echo "cd '$work/ws1/$p'"
    echo "pulumi --non-interactive stack select --create --stack dev"
    echo "pulumi --non-interactive up --yes --skip-preview --stack dev --config-file '$shared' --color never --json > /dev/null"
    echo "pulumi --non-interactive stack output --json --show-secrets --stack dev > /dev/null"
  done
} > "$work/loop.sh"
export PATH="$work/nowork:$PATH"
hyperfine --warmup 3 --runs 30 -N --export-json "$work/cost.json" \
  --command-name "shell loop" "sh $work/loop.sh" \
  --command-name "mara up --parallel 1" "$MARA -C $work/ws1 up --yes --parallel 1 --color never -q" > "$work/cost.txt"
cat "$work/cost.txt"
python3 - "$work/cost.json" "$count" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
n = int(sys.argv[2])
loop, mara = r["shell loop"], r["mara up --parallel 1"]
print(f"projects: {n}")
print(f"shell loop: {loop['mean']*1000:.1f} ms ± {loop['stddev']*1000:.1f}")
print(f"mara:       {mara['mean']*1000:.1f} ms ± {mara['stddev']*1000:.1f}")
print(f"mara's own cost per project: {(mara['mean']-loop['mean'])*1000/n:.2f} ms")
PY

# --- 2. Parallel efficiency -----------------------------------------------------------------
# Every project's operation takes the same fixed time: the no-work pulumi sleeps in `up` (every
# other call answers at once). The wall time is compared with the graph's critical path: the
# longest chain of dependent projects times that fixed time.
delay_ms=1000
mkdir -p "$work/fixed"
sed "s/^    up|refresh|destroy) echo/    up|refresh|destroy) sleep $((delay_ms / 1000)); echo/" "$work/nowork/pulumi" > "$work/fixed/pulumi"
chmod +x "$work/fixed/pulumi"
export PATH="$work/fixed:${PATH#"$work/nowork:"}"
cp -r examples/mara-local "$work/ws2"
rm -rf "$work/ws2/.mara"
length=$("$MARA" -C "$work/ws2" show-execution --format json | python3 -c '
import json, sys
plan = json.load(sys.stdin)["projects"]
depth = {}
for p in plan:  # in execution order, so every dependency comes first
    depth[p["path"]] = 1 + max((depth[a] for a in p["after"]), default=0)
print(max(depth.values()))')
# One project's engine time: its three calls, measured alone (`sleep` itself overshoots a little).
cat > "$work/one-project.sh" <<SH
pulumi --non-interactive stack select --create --stack dev
pulumi --non-interactive up --yes --skip-preview --stack dev --json > /dev/null
pulumi --non-interactive stack output --json --show-secrets --stack dev > /dev/null
SH
hyperfine --warmup 1 --runs 10 -N --export-json "$work/one.json" --command-name "one project's engine calls" "sh $work/one-project.sh" > /dev/null
hyperfine --warmup 1 --runs 5 -N --export-json "$work/parallel.json" \
  --command-name "mara up --parallel 16 (each project ${delay_ms} ms)" \
  "$MARA -C $work/ws2 up --yes --parallel 16 --color never -q" > "$work/parallel.txt"
cat "$work/parallel.txt"
python3 - "$work/parallel.json" "$length" "$work/one.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
length = int(sys.argv[2])
project = json.load(open(sys.argv[3]))["results"][0]["mean"]
critical = length * project
print(f"one project's engine time: {project * 1000:.1f} ms")
print(f"critical path: {length} projects x {project:.3f} s = {critical:.3f} s")
print(f"wall time: {r['mean']:.3f} s ± {r['stddev']:.3f}")
print(f"wall time / critical path: {r['mean'] / critical:.3f}")
PY
