"""`--shard K/N`: the K-th of N stable parts of a class, for any job runner that starts N copies.

The trees are sorted by name and tree i (0-based) goes to shard i mod N + 1, so every
copy, on any machine, agrees on who grades which tree without talking to the others,
and the shards together hold each tree exactly once. K counts from 1 (a runner whose
index counts from 0, a Slurm array or a Kubernetes indexed Job, passes index + 1).
"""

from __future__ import annotations

import re


def parse(text: str) -> tuple[int, int]:
    """"K/N" -> (K, N), with 1 <= K <= N."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not match:
        raise ValueError(f"--shard {text!r}: give K/N, e.g. 1/4 (K counts from 1)")
    k, n = int(match[1]), int(match[2])
    if not 1 <= k <= n:
        raise ValueError(f"--shard {text}: K must be between 1 and N")
    return k, n


def shard(trees, k: int, n: int) -> list[str]:
    """The trees of shard K of N, sorted."""
    return [tree for index, tree in enumerate(sorted(trees)) if index % n == k - 1]
