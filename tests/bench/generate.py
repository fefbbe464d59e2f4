#!/usr/bin/env python3
"""A synthetic mara workspace for the benchmarks (docs/benchmarks.md).

    python3 tests/bench/generate.py N DIR [--seed S] [--files F]

N projects in layers (about sqrt(N) of them, so that chains stay long and layers wide), each with
one to three `after` edges to random projects of the layers before it, most of them to the layer
just before; the same seed gives the same workspace, byte for byte. Every project is a directory
holding a Pulumi.yaml (and F-1 more small files), under provider `synthetic` (infra_type
`synthetic`), stack `dev`, with a file backend under .mara/.
"""

import argparse
import math
import os
import random


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("n", type=int)
    parser.add_argument("dir")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--files", type=int, default=2, help="files per project (Pulumi.yaml included)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    n = args.n
    layers = max(2, round(math.sqrt(n) / 2))
    # Layer sizes as even as they can be.
    sizes = [n // layers + (1 if i < n % layers else 0) for i in range(layers)]
    paths = []
    by_layer = []
    for layer, size in enumerate(sizes):
        names = [f"layer{layer:03}/p{len(paths) + i:05}" for i in range(size)]
        by_layer.append(names)
        paths.extend(names)

    lines = [
        f"# {n} synthetic projects in {layers} layers, seed {args.seed} (tests/bench/generate.py).",
        f'description = "Synthetic: {n} projects in {layers} layers"',
        'infra_type = "synthetic"',
        "",
    ]
    for layer, names in enumerate(by_layer):
        for path in names:
            after = set()
            if layer > 0:
                for _ in range(rng.randint(1, 3)):
                    # Mostly the layer just before; now and then any earlier one.
                    source = layer - 1 if rng.random() < 0.8 else rng.randrange(layer)
                    after.add(rng.choice(by_layer[source]))
            lines.append("[[project]]")
            lines.append(f'path = "{path}"')
            if after:
                quoted = ", ".join(f'"{a}"' for a in sorted(after))
                lines.append(f"after = [{quoted}]")
            lines.append("")

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
    for path in paths:
        name = path.split("/")[1]
        write(root, f"{path}/Pulumi.yaml", f"name: {name}\nruntime: yaml\noutputs:\n  name: {name}\n")
        for i in range(1, args.files):
            write(root, f"{path}/file{i}.txt", f"{name} {i}\n")


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
