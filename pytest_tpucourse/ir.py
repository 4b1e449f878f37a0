"""What a program contains, as graded tests read it: the traced program (kernels, ops outside
them, custom VJPs), what a kernel fetches and computes, its VMEM, the BlockSpec rules, XLA's
HLO text, and the checks on a learner's own IR readers.

A face over `readers/`, `checking/` and the JAX shim: graded tests import this module, never
those packages.
"""

from __future__ import annotations

from .checking.block_rules import assert_rule_matches_lowering
from .checking.ir_answers import (assert_dots_match, assert_rows_are_rows, assert_rows_match,
                                  assert_summary_matches, numbered)
from .checking.schedules import assert_schedule_matches
from .core.jax_internals import current_locations, persistent_cache
from .readers.block_skipping import (BAND_ADVICE, assert_attention_skips_fetches,
                                     assert_causal_attention_skips_fetches, assert_compute_is_conditional,
                                     fetch_log, pipeline_schedule, poison_unseen_keys, seen_keys_reference,
                                     sliding_window_empty)
from .readers.blockspecs import lowering_error
from .readers.hlo_text import convolution_window, dot_numbers, dots, largest_arrays, parse, read_dump, summary
from .readers.traced_program import (assert_backward_is_pallas, assert_communicates_by_remote_dma,
                                     assert_compute_overlaps_communication, assert_grid_steps,
                                     assert_no_value_as_large_as, count_pallas_calls, defines_custom_vjp,
                                     kernel_grids, pallas_call_eqns, primitives_outside_kernels)
from .readers.vmem_footprint import Buffer, footprint_bytes, kernel_buffers

__all__ = [
    "BAND_ADVICE", "Buffer", "assert_attention_skips_fetches", "assert_backward_is_pallas",
    "assert_causal_attention_skips_fetches", "assert_communicates_by_remote_dma",
    "assert_compute_is_conditional", "assert_compute_overlaps_communication", "assert_dots_match",
    "assert_grid_steps", "assert_no_value_as_large_as", "assert_rows_are_rows", "assert_rows_match",
    "assert_rule_matches_lowering", "assert_schedule_matches", "assert_summary_matches",
    "convolution_window", "count_pallas_calls", "current_locations", "defines_custom_vjp", "dot_numbers",
    "dots", "fetch_log", "footprint_bytes", "kernel_buffers", "kernel_grids", "largest_arrays", "lowering_error", "numbered",
    "pallas_call_eqns", "parse", "persistent_cache", "pipeline_schedule", "poison_unseen_keys", "primitives_outside_kernels",
    "read_dump", "seen_keys_reference", "sliding_window_empty", "summary",
]
