#!/usr/bin/env python3
"""Interleaved rounds (docs/benchmarks.md): every command of a set once per round, the set's order
turned by one each round so that none always runs first, after one warm-up round that is not
counted. Prints, per command, the median wall time and its min–max, in milliseconds, as JSON.

    python3 tests/bench/rounds.py ROUNDS < SPEC.json

SPEC is a list of {"label", "sh", "env" (optional), "prepare" (optional: a shell command run,
untimed, before each timed run)}. A command that fails stops the measurement: a figure of a
failing run would mean nothing.
"""

import json
import os
import statistics
import subprocess
import sys
import time


def run(sh, env):
    started = time.monotonic()
    done = subprocess.run(["sh", "-c", sh], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = (time.monotonic() - started) * 1000
    if done.returncode != 0:
        sys.exit(f"`{sh}` failed ({done.returncode}): {done.stderr.decode(errors='replace')[-2000:]}")
    return took


def main():
    rounds = int(sys.argv[1])
    spec = json.load(sys.stdin)
    times = {c["label"]: [] for c in spec}
    for r in range(rounds + 1):
        turn = r % len(spec)
        for c in spec[turn:] + spec[:turn]:
            env = dict(os.environ, **c.get("env", {}))
            if c.get("prepare"):
                subprocess.run(["sh", "-c", c["prepare"]], env=env, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            took = run(c["sh"], env)
            if r > 0:
                times[c["label"]].append(took)
    print(json.dumps({
        label: {"median": statistics.median(t), "min": min(t), "max": max(t), "rounds": len(t)}
        for label, t in times.items()
    }))


if __name__ == "__main__":
    main()
