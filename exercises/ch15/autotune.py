"""A block-size autotuning pass for the sliding-window kernels, with per-chip winners on disk.

Write:
  candidates(q_shape, k_shape, dtype, *, window, chip) -> [dict(block_q=, block_kv=), ...]
      block sizes from BLOCK_CHOICES that divide both lengths and fit the chip's scoped
      VMEM (SCOPED_VMEM_BYTES), counting every pipelined block twice, each scratch once;
  problem_key(q_shape, k_shape, dtype, window) -> str
      the JSON a problem is filed under (json.dumps(..., sort_keys=True));
  sweep(problems, *, chip, time_ms) -> records
      one dict(problem=, config=, chip=, median_ms=) per (problem, candidate), the time
      from time_ms(problem, config) (on a TPU, the kernel's median; never off-chip);
  winners(records) -> {problem key: fastest config};
  write_cache(records, directory, device_kind) -> path
      Tokamax's layout: <directory>/<device kind, lower case, spaces as _>/window_attention.json
      = {problem JSON: {config JSON: {"median_evaluation_time_ms": t}}}, merged with what
      is there;
  tuned_blocks(q_shape, k_shape, dtype, window, *, device_kind=None, directory=None)
      the fastest cached config, or None; device_kind None: jax.devices()[0].device_kind;
      directory None: the CACHE_ENV environment variable, else DEFAULT_CACHE_DIR.
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


def candidates(q_shape, k_shape, dtype, *, window: int, chip: str = "v5e") -> list[dict]:
    """Block sizes that divide both lengths and fit the chip's scoped VMEM, smallest first."""
    raise NotImplementedError("write candidates(): the block sizes that divide and fit VMEM")


def problem_key(q_shape, k_shape, dtype, window: int) -> str:
    """The JSON a problem is filed under (sorted keys, so equal problems give equal keys)."""
    raise NotImplementedError("write problem_key(): json.dumps of the problem, sort_keys=True")


def sweep(problems, *, chip: str, time_ms) -> list[dict]:
    """One record per (problem, configuration): time_ms(problem, config) in milliseconds.

    problems: dicts with q_shape, k_shape, dtype, window."""
    raise NotImplementedError("write sweep(): one record per problem and candidate")


def winners(records) -> dict:
    """{problem key: the fastest configuration} over a sweep's records."""
    raise NotImplementedError("write winners(): the fastest record per problem")


def write_cache(records, directory, device_kind: str) -> Path:
    """Add a sweep's records to the cache file of `device_kind`; returns the file."""
    raise NotImplementedError("write write_cache(): Tokamax's per-device JSON layout")


def tuned_blocks(q_shape, k_shape, dtype, window: int, *, device_kind: str | None = None,
                 directory=None) -> dict | None:
    """The fastest cached configuration for this problem on this device, or None."""
    raise NotImplementedError("write tuned_blocks(): read the cache at call time")
