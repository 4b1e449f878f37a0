"""`--shard K/N`: the K-th of N stable parts of a class, for any job runner that starts N copies.

The trees are sorted by name and tree i (0-based) goes to shard i mod N + 1, so every
copy, on any machine, agrees on who grades which tree without talking to the others,
and the shards together hold each tree exactly once. K counts from 1 (a runner whose
index counts from 0, a Slurm array or a Kubernetes indexed Job, passes index + 1).

Each shard's gradebook says which grading it is part of without the shards talking either: the
class (how many trees were named, and a digest of their sorted names: the same on every copy)
and the parts it holds (`held`). `merged_set` takes only one grading's shards, each once, all of
them (or those left out named: a partial merge), whose trees are the class's in the split's order.
"""

from __future__ import annotations

import hashlib
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



# ---------------------------------------------------------------- which shards of which class a gradebook holds


def class_facts(trees) -> dict:
    """What every shard of one grading shares about its class: how many trees were named on the
    command line, and a digest of their sorted names (each shard is given the same list)."""
    names = sorted(trees)
    return {"trees": len(names), "digest": hashlib.sha256("\0".join(names).encode("utf-8", "surrogatepass")).hexdigest()}


def held(k: int | None = None, n: int | None = None) -> dict | None:
    """A gradebook's `shard`: None for the whole class, else the parts it holds of N."""
    if k is None or n == 1:
        return None
    return {"parts": [k], "of": n}


def describe(holds: dict | None) -> str:
    """"the whole class", or "shards 1, 3 of 4"."""
    if holds is None:
        return "the whole class"
    parts = holds["parts"]
    return f"shard{'s' if len(parts) > 1 else ''} {', '.join(map(str, parts))} of {holds['of']}"


class ShardSetError(ValueError):
    """Gradebooks that are not one grading's shards, or not all of them."""


def merged_set(books: list[tuple[str, dict | None]], of_class: dict, trees: dict[str, list[str]],
               without: tuple[tuple[int, int], ...] = ()) -> dict | None:
    """The `shard` of the gradebook merged from `books` ((file, its shard) each, all of the class
    `of_class`; trees: file -> its trees): None when they are the whole class; ShardSetError when
    they are not one grading's distinct shards, or leave out a shard `without` does not name."""
    if any(holds is None for _, holds in books):
        if len(books) > 1:
            whole = next(name for name, holds in books if holds is None)
            raise ShardSetError(f"{whole} is the whole class's gradebook: it merges with no other")
        return None
    splits = {holds["of"] for _, holds in books}
    if len(splits) > 1:
        raise ShardSetError("shards of different splits: " + "; ".join(f"{name}: {describe(holds)}"
                                                                      for name, holds in books))
    n = splits.pop()
    seen: dict[int, str] = {}
    for name, holds in books:
        for k in holds["parts"]:
            if k in seen:
                raise ShardSetError(f"shard {k}/{n} is in both {seen[k]} and {name}")
            seen[k] = name
    named = {k for k, of in without}
    if any(of != n for _, of in without) or named & set(seen):
        raise ShardSetError(f"--without-shard {', '.join(f'{k}/{of}' for k, of in without)}: name only shards of "
                            f"{n} that are not given ({describe({'parts': sorted(seen), 'of': n})} are)")
    missing = sorted(set(range(1, n + 1)) - set(seen) - named)
    if missing:
        given = describe({"parts": sorted(seen), "of": n})
        raise ShardSetError(f"{given} given, of one grading: {', '.join(f'{k}/{n}' for k in missing)} missing. Merge "
                            f"every shard, or name those left out (--without-shard K/N) for a partial merge")
    every = sorted(name for names in trees.values() for name in names)
    if named:
        if len(every) > of_class["trees"]:
            raise ShardSetError(f"{len(every)} trees, more than the class of {of_class['trees']} they were graded in")
        return {"parts": sorted(seen), "of": n}
    if class_facts(every) != of_class:
        raise ShardSetError(f"the shards' {len(every)} trees are not the class of {of_class['trees']} they were "
                            f"graded as")
    for name, holds in books:
        expected = sorted(t for k in holds["parts"] for t in shard(every, k, n))
        if sorted(trees[name]) != expected:
            raise ShardSetError(f"{name} holds trees that are not those of {describe(holds)}")
    return None
