"""Exercise ch12.narrate: narrate an unfamiliar optimized HLO dump.

narrate(hlo) -> dict with these keys (names without "%", lists in text order; graded in any order):
    kernels       [(name, opcode)] of the ENTRY instructions, leaving out parameter,
                  constant, tuple, get-tuple-element and bitcast
    fusions       [(name, kind, root opcode)] of the fusion instructions of ENTRY: kind as
                  printed ("kLoop"), root the opcode of the ROOT instruction of the
                  computation the fusion calls
    largest       (name, array) of the ENTRY instruction whose result array is the
                  largest in bytes, array written "f32[8,256]" (no layout); a tuple result
                  counts by its largest element; the first one on a tie (any is accepted)
    collectives   [(name, opcode)] of every all-reduce, all-reduce-start, all-gather,
                  all-gather-start, collective-permute, collective-permute-start,
                  reduce-scatter, all-to-all, ragged-all-to-all and collective-broadcast,
                  in any computation
    custom_calls  [(name, custom_call_target)] of every custom-call, in any computation
    while_loops   [(name, trip count)] of every while, in any computation: the trip count
                  XLA proved (backend_config known_trip_count n) as an int, else None
Bytes per element: pred, s8, u8 1; bf16, f16, s16, u16 2; f32, s32, u32 4; f64, s64,
u64, c64 8; c128 16. XLA writes notes like /*index=5*/ inside long tuple shapes.
"""

import json
import re


def narrate(hlo: str) -> dict:
    """kernels, fusions, largest, collectives, custom_calls and while_loops of an HLO module."""
    raise NotImplementedError("write narrate(): split the module into computations, then read ENTRY")
