#!/usr/bin/env python3
"""A synthetic mara workspace for the benchmarks (docs/benchmarks.md).

    python3 tests/bench/generate.py N DIR [--seed S] [--files F] [--layers L]
    python3 tests/bench/generate.py --shape PLAN.json DIR    (the graph of a plan, e.g. aws's)

N projects in layers (about sqrt(N)/2 of them unless --layers says, so that chains stay long and
layers wide), each with
one to three `after` edges to random projects of the layers before it, most of them to the layer
just before; the same seed gives the same workspace, byte for byte. Every project is a directory
holding a Pulumi.yaml (and F-1 more small files), under provider `synthetic` (infra_type
`synthetic`), stack `dev`, with a file backend under .mara/. With --shape, the projects and
`after` edges are those of a plan printed by `mara show-execution --format json` (stage included).
"""

import json

import argparse
import math
import os
import random


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("n", type=int, nargs="?")
    parser.add_argument("dir")
    parser.add_argument("--shape", help="a plan as `mara show-execution --format json` prints it")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--files", type=int, default=2, help="files per project (Pulumi.yaml included)")
    parser.add_argument("--layers", type=int, help="how many layers (default: about sqrt(N)/2)")
    parser.add_argument("--strict", action="store_true", help="edges only to the layer just before")
    args = parser.parse_args()
    if args.shape:
        plan = json.load(open(args.shape))["projects"]
        projects = [(p["path"], p["after"], p["stage"]) for p in plan]
        title = f"the graph of provider {json.load(open(args.shape))['provider']}"
    else:
        projects = layered(args.n, random.Random(args.seed), args.layers, args.strict)
        title = f"{args.n} projects, seed {args.seed}"
    lines = [
        f"# {len(projects)} synthetic projects: {title} (tests/bench/generate.py).",
        f'description = "Synthetic: {title}"',
        'infra_type = "synthetic"',
        "",
    ]
    for path, after, stage in projects:
        lines.append("[[project]]")
        lines.append(f'path = "{path}"')
        if stage != "kubernetes":
            lines.append(f'stage = "{stage}"')
        if after:
            quoted = ", ".join(f'"{a}"' for a in sorted(after))
            lines.append(f"after = [{quoted}]")
        lines.append("")
    paths = [path for path, _, _ in projects]

    root = args.dir
    os.makedirs(os.path.join(root, "providers"), exist_ok=True)
    os.makedirs(os.path.join(root, "config", "pulumi"), exist_ok=True)
    write(root, "mara.toml", 'provider = "synthetic"\nparallel = 16\n')
    write(root, "providers/synthetic.toml", "\n".join(lines))
    write(
        root,
        "config/pulumi/environment",
        "PULUMI_STACK=dev\nPULUMI_BACKEND_URL=file://.mara/pulumi-state\nPULUMI_CONFIG_PASSPHRASE=bench\n",
    )
    write(root, "config/pulumi/Pulumi.dev.yaml", "config:\n  kubernetes:infra_type: synthetic\n")
    for i, path in enumerate(paths):
        name = f"p{i:05}"
        write(root, f"{path}/Pulumi.yaml", f"name: {name}\nruntime: yaml\noutputs:\n  name: {name}\n")
        for j in range(1, args.files):
            write(root, f"{path}/file{j}.txt", f"{name} {j}\n")


def layered(n, rng, layers=None, strict=False):
    """(path, after, stage) of `n` projects in `layers` layers (about sqrt(n)/2 by default); with
    `strict`, each after projects of the layer just before only."""
    layers = layers or max(2, round(math.sqrt(n) / 2))
    # Layer sizes as even as they can be.
    sizes = [n // layers + (1 if i < n % layers else 0) for i in range(layers)]
    by_layer = []
    count = 0
    for layer, size in enumerate(sizes):
        by_layer.append([f"layer{layer:03}/p{count + i:05}" for i in range(size)])
        count += size
    projects = []
    for layer, names in enumerate(by_layer):
        for path in names:
            after = set()
            if layer > 0:
                for _ in range(rng.randint(1, 3)):
                    # Mostly the layer just before; now and then any earlier one.
                    source = layer - 1 if strict or rng.random() < 0.8 else rng.randrange(layer)
                    after.add(rng.choice(by_layer[source]))
            projects.append((path, sorted(after), "kubernetes"))
    return projects


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
