"""Plain data across a process boundary: arrays, numbers, strings, lists and dicts, never pickle.

The trusted check (docs/grading.md) sends a graded tree's worker process only inputs, and reads
back only results, in this format; nothing in it can name a class to build or code to run, so
reading what an untrusted process wrote can yield nothing but plain values, within limits.

    bytes = b"TPUPLAIN1\\n" + <8-byte big-endian header length> + <header: JSON> + <array buffers>

The header is JSON (NaN and infinities as Python's json writes them) in which a few one-key
objects stand for what JSON lacks:

    {"__array__": {"dtype": "bfloat16", "shape": [2, 3], "offset": 0}}   raw C-order bytes
    {"__tuple__": [...]}                           a tuple (a list stays a list)
    {"__map__": [[key, value], ...]}               a dict whose keys are not all strings
    {"__shards__": {"shape": [...], "pieces": [[device, [[start, stop], ...], array], ...]}}
                                                   an array spread over devices, buffer by buffer
    {"__node__": "kind", ...}                      what the reader's `nodes` hook rebuilds (inputs
                                                   only: a mesh, an object a course module builds)

Any other dict is a dict with string keys.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from . import untrusted_json

MAGIC = b"TPUPLAIN1\n"
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64", "complex64", "complex128")
SPECIAL = ("__array__", "__tuple__", "__map__", "__shards__", "__node__")


@dataclass(frozen=True)
class Shards:
    """An array held by several devices, as each device holds its part (a replicated output has a
    whole copy on each): (device id, the part's index as (start, stop) per axis, the part)."""

    shape: tuple[int, ...]
    pieces: tuple[tuple[int, tuple[tuple[int, int], ...], np.ndarray], ...]


class PlainDataError(ValueError):
    """Bytes that are not plain data in this format, or beyond the reader's limits."""


@dataclass(frozen=True)
class Limits:
    """What a reader accepts: the whole message, the JSON header, the nesting, the arrays."""

    total_bytes: int = 512 * 2**20
    header_bytes: int = 16 * 2**20
    depth: int = 64
    arrays: int = 10_000


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype named (bfloat16 through ml_dtypes, which JAX installs)."""
    if name not in DTYPES:
        raise PlainDataError(f"dtype {name!r} is not one plain data carries ({', '.join(DTYPES)})")
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def encode(value, *, node=None) -> bytes:
    """`value` as bytes. node(obj) -> a dict of plain data for an object that is none of the
    plain kinds (an input node), else None; anything else is a TypeError."""
    buffers: list[bytes] = []
    offset = 0

    def walk(obj, depth: int):
        nonlocal offset
        if depth > Limits.depth:
            raise TypeError("nested too deep for plain data")
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj)
        if isinstance(obj, np.generic):
            return walk(obj.item() if obj.dtype.name != "bfloat16" else np.asarray(obj), depth)
        if isinstance(obj, np.ndarray):
            array = np.ascontiguousarray(obj)
            name = array.dtype.name
            if name not in DTYPES:
                raise TypeError(f"arrays of dtype {name} are not plain data")
            data = array.tobytes()
            entry = {"__array__": {"dtype": name, "shape": list(array.shape), "offset": offset}}
            buffers.append(data)
            offset += len(data)
            return entry
        if isinstance(obj, Shards):
            return {"__shards__": {"shape": list(obj.shape), "pieces": [
                [int(device), [[int(a), int(b)] for a, b in index], walk(part, depth + 1)]
                for device, index, part in obj.pieces]}}
        if isinstance(obj, tuple):
            return {"__tuple__": [walk(x, depth + 1) for x in obj]}
        if isinstance(obj, list):
            return [walk(x, depth + 1) for x in obj]
        if isinstance(obj, dict):
            if all(isinstance(k, str) for k in obj) and not (len(obj) == 1 and next(iter(obj)) in SPECIAL):
                return {k: walk(v, depth + 1) for k, v in obj.items()}
            return {"__map__": [[walk(k, depth + 1), walk(v, depth + 1)] for k, v in obj.items()]}
        built = node(obj) if node is not None else None
        if built is not None:
            return {"__node__": built["kind"], **{k: walk(v, depth + 1) for k, v in built.items() if k != "kind"}}
        raise TypeError(f"a {type(obj).__name__} is not plain data")

    header = json.dumps(walk(value, 0), allow_nan=True, separators=(",", ":")).encode("utf-8")
    return MAGIC + len(header).to_bytes(8, "big") + header + b"".join(buffers)


def decode(data: bytes, *, limits: Limits = Limits(), nodes=None):
    """The value `data` encodes. nodes(kind, fields) rebuilds a {"__node__": kind} entry; without
    it such an entry is refused. Anything malformed or beyond `limits` is a PlainDataError."""
    if len(data) > limits.total_bytes:
        raise PlainDataError(f"{len(data):,} bytes: more than the {limits.total_bytes:,} read")
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        raise PlainDataError("not plain data (no TPUPLAIN1 header)")
    start = len(MAGIC) + 8
    size = int.from_bytes(data[len(MAGIC):start], "big")
    if size > limits.header_bytes or start + size > len(data):
        raise PlainDataError(f"a header of {size:,} bytes does not fit")
    try:
        # Each tuple, map or array is a one-key object around its contents: two JSON levels for one.
        tree = untrusted_json.loads(bytes(data[start:start + size]), depth=2 * limits.depth + 2)
    except untrusted_json.JsonError as error:
        raise PlainDataError(f"the header is not JSON within limits: {error}") from None
    blob = memoryview(data)[start + size:]
    count = 0

    def walk(obj, depth: int):
        nonlocal count
        if depth > limits.depth:
            raise PlainDataError("nested too deep")
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if isinstance(obj, list):
            return [walk(x, depth + 1) for x in obj]
        if not isinstance(obj, dict):
            raise PlainDataError(f"unexpected {type(obj).__name__} in the header")
        if len(obj) == 1 and "__array__" in obj:
            count += 1
            if count > limits.arrays:
                raise PlainDataError(f"more than {limits.arrays} arrays")
            return _array(obj["__array__"], blob)
        if len(obj) == 1 and "__tuple__" in obj and isinstance(obj["__tuple__"], list):
            return tuple(walk(x, depth + 1) for x in obj["__tuple__"])
        if len(obj) == 1 and "__shards__" in obj:
            return _shards(obj["__shards__"], lambda x: walk(x, depth + 1))
        if len(obj) == 1 and "__map__" in obj and isinstance(obj["__map__"], list):
            pairs = obj["__map__"]
            if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
                raise PlainDataError("a map entry is not a [key, value] pair")
            out = {}
            for key, value in pairs:
                key = walk(key, depth + 1)
                try:
                    hash(key)
                except TypeError:
                    raise PlainDataError("a map key that is a list or dict") from None
                out[key] = walk(value, depth + 1)
            return out
        if "__node__" in obj:
            if nodes is None:
                raise PlainDataError(f"a {obj['__node__']!r} node where only plain values are read")
            fields = {k: walk(v, depth + 1) for k, v in obj.items() if k != "__node__"}
            return nodes(str(obj["__node__"]), fields)
        return {str(k): walk(v, depth + 1) for k, v in obj.items()}

    return walk(tree, 0)


def _array(spec, blob: memoryview) -> np.ndarray:
    if not isinstance(spec, dict) or not {"dtype", "shape", "offset"} <= set(spec):
        raise PlainDataError("an array entry without dtype, shape and offset")
    dtype = numpy_dtype(spec["dtype"])
    shape, offset = spec["shape"], spec["offset"]
    if not (isinstance(shape, list) and all(isinstance(n, int) and n >= 0 for n in shape)
            and isinstance(offset, int) and offset >= 0):
        raise PlainDataError(f"an array entry with shape {shape!r} and offset {offset!r}")
    nbytes = math.prod(shape) * dtype.itemsize
    if offset + nbytes > len(blob):
        raise PlainDataError(f"an array of {nbytes:,} bytes at {offset:,} runs past the data")
    return np.frombuffer(blob[offset:offset + nbytes], dtype=dtype).reshape(shape).copy()


def _shards(spec, walk) -> Shards:
    try:
        shape = tuple(int(n) for n in spec["shape"])
        pieces = tuple((int(device), tuple((int(a), int(b)) for a, b in index), walk(part))
                       for device, index, part in spec["pieces"])
    except (KeyError, TypeError, ValueError) as error:
        raise PlainDataError(f"a sharded array entry that does not read: {error}") from None
    if not all(isinstance(part, np.ndarray) and len(index) == len(shape) for _, index, part in pieces):
        raise PlainDataError("a sharded array whose parts are not arrays of its rank")
    return Shards(shape, pieces)


def plain(obj, *, depth: int = 0):
    """What a function returned, as plain data: JAX and numpy arrays as numpy arrays (an array
    spread over several devices as Shards), numpy scalars as Python numbers, tuples, lists and
    dicts item by item, a dataclass as the dict of its fields, an enum as its value. Anything
    else is a TypeError naming it."""
    import dataclasses
    import enum

    if depth > Limits.depth:
        raise TypeError("nested too deep for plain data")
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, enum.Enum):
        return plain(obj.value, depth=depth + 1)
    if isinstance(obj, np.generic):
        return np.asarray(obj) if obj.dtype.name == "bfloat16" else obj.item()
    if isinstance(obj, np.ndarray):
        return obj
    if _is_jax_array(obj):
        shards = obj.addressable_shards
        if len(shards) > 1:
            return Shards(tuple(obj.shape), tuple(
                (s.device.id, tuple(_bounds(i, n) for i, n in zip(s.index, obj.shape)), np.asarray(s.data))
                for s in sorted(shards, key=lambda s: s.device.id)))
        return np.asarray(obj)
    if isinstance(obj, tuple):
        return tuple(plain(x, depth=depth + 1) for x in obj)
    if isinstance(obj, list):
        return [plain(x, depth=depth + 1) for x in obj]
    if isinstance(obj, dict):
        return {plain(k, depth=depth + 1): plain(v, depth=depth + 1) for k, v in obj.items()}
    if isinstance(obj, (set, frozenset)):
        return sorted((plain(x, depth=depth + 1) for x in obj), key=repr)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name), depth=depth + 1) for f in dataclasses.fields(obj)}
    raise TypeError(f"a {type(obj).__module__}.{type(obj).__qualname__} is not plain data")


def _is_jax_array(obj) -> bool:
    """A jax.Array itself, never an object that only looks like one (a `shape` and
    `addressable_shards` of its own choosing)."""
    import sys

    jax = sys.modules.get("jax")
    return jax is not None and isinstance(obj, jax.Array)


def _bounds(index: slice, size: int) -> tuple[int, int]:
    start, stop, _ = index.indices(size)
    return start, stop
