"""A block-size autotuning pass for the sliding-window kernels, with per-chip winners on disk.

The pass: for each problem (q shape, k shape, dtype, window) list the block sizes that
divide the lengths and fit the chip's scoped VMEM (`candidates`), time each one
(`sweep`, one record per (problem, configuration), with the timer it is given: on a TPU
the kernel's median time; nothing is timed off-chip), keep the fastest per problem
(`winners`) and write them where the kernel reads them at call time (`write_cache`,
`tuned_blocks`).

The cache follows Tokamax's autotuning-cache layout without depending on Tokamax:
one JSON file per (device kind, op), `<dir>/<device kind in snake case>/window_attention.json`,
mapping the JSON of a problem to the JSON of each configuration tried and its
{"median_evaluation_time_ms": ...}; the configuration read back is the fastest.

VMEM. Mosaic keeps every pipelined block in two buffers (the next block is copied
while the current one is used) and each scratch array once; a (rows, lanes) buffer
occupies rows rounded up to 8 and lanes to 128, so a per-row f32 statistic (block_q, 1)
takes as much as (block_q, 128). Each of the three kernels is counted (forward: q, k,
v in, out and lse out, m, l, acc scratch; dq: q, k, v, dO, lse, delta in, dq out, one
accumulator; dk/dv: the same in, dk and dv out, two accumulators) and the largest
decides. The (block_q, block_kv) score tiles s, P, dP and dS live in VMEM too while a
step runs; they are added, so the estimate errs on the safe side.
"""

import itertools
import json
import math
import os
from pathlib import Path

import jax.numpy as jnp

OP = "window_attention"
BLOCK_CHOICES = (128, 256, 512, 1024)
SCOPED_VMEM_BYTES = {"v5e": 16 * 2 ** 20, "v5p": 16 * 2 ** 20, "v6e": 32 * 2 ** 20, "v7x": 32 * 2 ** 20}
CACHE_ENV = "WINDOW_ATTENTION_AUTOTUNE_DIR"
DEFAULT_CACHE_DIR = Path(__file__).with_name("autotuning")


def _buffer_bytes(rows: int, lanes: int, itemsize: int) -> int:
    return math.ceil(rows / 8) * 8 * math.ceil(lanes / 128) * 128 * itemsize


def vmem_bytes(config: dict, *, head_dim: int, dtype) -> int:
    """VMEM the largest of the three kernels (forward, dq, dk/dv) takes at these block sizes."""
    bq, bkv = config["block_q"], config["block_kv"]
    size = jnp.dtype(dtype).itemsize
    q_rows, kv_rows = _buffer_bytes(bq, head_dim, size), _buffer_bytes(bkv, head_dim, size)
    q_stat = _buffer_bytes(bq, 1, 4)  # one f32 per row, padded to a lane row
    tiles = 4 * _buffer_bytes(bq, bkv, 4)  # s, P, dP, dS
    # Blocks twice (double-buffered), scratch once.
    forward = 2 * (2 * q_rows + 2 * kv_rows + q_stat) + 2 * q_stat + _buffer_bytes(bq, head_dim, 4)
    dq = 2 * (3 * q_rows + 2 * kv_rows + 2 * q_stat) + _buffer_bytes(bq, head_dim, 4)
    dkv = 2 * (2 * q_rows + 4 * kv_rows + 2 * q_stat) + 2 * _buffer_bytes(bkv, head_dim, 4)
    return max(forward, dq, dkv) + tiles


def candidates(q_shape, k_shape, dtype, *, window: int, chip: str = "v5e") -> list[dict]:
    """Block sizes that divide both lengths and fit the chip's scoped VMEM, smallest first."""
    q_len, kv_len, head_dim = q_shape[2], k_shape[2], q_shape[3]
    limit = SCOPED_VMEM_BYTES[chip]
    found = []
    for bq, bkv in itertools.product(BLOCK_CHOICES, BLOCK_CHOICES):
        config = dict(block_q=bq, block_kv=bkv)
        if q_len % bq or kv_len % bkv:
            continue
        if vmem_bytes(config, head_dim=head_dim, dtype=dtype) <= limit:
            found.append(config)
    return found


def problem_key(q_shape, k_shape, dtype, window: int) -> str:
    """The JSON a problem is filed under (sorted keys, so equal problems give equal keys)."""
    return json.dumps(dict(q_shape=list(q_shape), k_shape=list(k_shape),
                           dtype=jnp.dtype(dtype).name, window=int(window)), sort_keys=True)


def sweep(problems, *, chip: str, time_ms) -> list[dict]:
    """One record per (problem, configuration): time_ms(problem, config) in milliseconds.

    problems: dicts with q_shape, k_shape, dtype, window."""
    records = []
    for problem in problems:
        for config in candidates(problem["q_shape"], problem["k_shape"], problem["dtype"],
                                 window=problem["window"], chip=chip):
            records.append(dict(problem=problem, config=config, chip=chip,
                                median_ms=float(time_ms(problem, config))))
    return records


def winners(records) -> dict:
    """{problem key: the fastest configuration} over a sweep's records."""
    best = {}
    for r in records:
        p = r["problem"]
        key = problem_key(p["q_shape"], p["k_shape"], p["dtype"], p["window"])
        if key not in best or r["median_ms"] < best[key]["median_ms"]:
            best[key] = r
    return {key: r["config"] for key, r in best.items()}


def _device_file(directory: Path, device_kind: str) -> Path:
    return Path(directory) / device_kind.lower().replace(" ", "_") / f"{OP}.json"


def write_cache(records, directory, device_kind: str) -> Path:
    """Add a sweep's records to the cache file of `device_kind`; returns the file."""
    path = _device_file(directory, device_kind)
    data = json.loads(path.read_text()) if path.exists() else {}
    for r in records:
        p = r["problem"]
        key = problem_key(p["q_shape"], p["k_shape"], p["dtype"], p["window"])
        config = json.dumps(r["config"], sort_keys=True)
        data.setdefault(key, {})[config] = {"median_evaluation_time_ms": r["median_ms"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def tuned_blocks(q_shape, k_shape, dtype, window: int, *, device_kind: str | None = None,
                 directory=None) -> dict | None:
    """The fastest cached configuration for this problem on this device, or None."""
    if device_kind is None:
        import jax

        device_kind = jax.devices()[0].device_kind
    directory = directory or os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR
    path = _device_file(directory, device_kind)
    if not path.exists():
        return None
    tried = json.loads(path.read_text()).get(problem_key(q_shape, k_shape, dtype, window))
    if not tried:
        return None
    fastest = min(tried, key=lambda config: tried[config]["median_evaluation_time_ms"])
    return json.loads(fastest)
