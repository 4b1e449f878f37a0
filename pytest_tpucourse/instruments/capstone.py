"""The capstone's manifest (chapter 15): what it must say, and the suite it generates.

A capstone is checkable only if it says what it claims: the gap it closes, the kind of
work, the XLA floor and the hand-tuned ceiling it is measured against, the float64
oracle it is tested against, the shapes that matter and the corner cases it enumerates.
The learner's `manifest()` returns that table (read from capstone.toml); this module
says which fields are missing, each on its own line, resolves its import paths, and
turns its cases and targets into the references and arguments graded tests use.

Import paths are `package.module:attribute` for the floor, ceiling and oracle (importable
code), and `module:function` for the learner's own kernels, which live in the graded
chapter (reached through the `impl` fixture, never imported from here).
"""

from __future__ import annotations

import dataclasses
import importlib

from typing import TYPE_CHECKING

from ..core.outcomes import WrongResult

if TYPE_CHECKING:  # the references import JAX; reading a manifest's shapes (gates/criteria.py) does not
    from ..references import Reference

KINDS = ("attention variant", "autotuning pass", "benchmark entry")

# (dotted field, what it must hold): every field a complete manifest has.
FIELDS = (
    ("capstone.gap", "the gap the kernel closes, in one sentence"),
    ("capstone.kind", f"one of {', '.join(repr(k) for k in KINDS)}"),
    ("capstone.venue", "the public upstream repository the work is sent to (an https:// URL)"),
    ("kernel.forward", "module:function of the forward in this chapter, returning (out, lse)"),
    ("kernel.attention", "module:function of the differentiable kernel (custom_vjp) in this chapter"),
    ("baselines.floor", "package.module:function, the XLA implementation (the floor)"),
    ("baselines.ceiling", "package.module:function, the hand-tuned public kernel (the ceiling)"),
    ("baselines.ceiling_config", "the ceiling's tuned configuration, a table of keyword arguments"),
    ("baselines.oracle", "package.module:function, the float64 oracle returning (out, lse)"),
    ("targets", "the target shapes: [[targets]] with batch, heads, seq, head_dim, dtype, options"),
    ("cases", "the enumerated corner cases: [[cases]] with name, why, q_len, kv_len, head_dim, "
              "dtype, block_q, block_kv, options"),
)
TARGET_KEYS = ("batch", "heads", "seq", "head_dim", "dtype", "options")
CASE_KEYS = ("name", "why", "q_len", "kv_len", "head_dim", "dtype", "block_q", "block_kv", "options")


def _lookup(manifest: dict, dotted: str):
    value = manifest
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _blank(value) -> bool:
    return value is None or value == "" or value == [] or value == {} or (
        isinstance(value, str) and value.strip().upper().startswith("TODO"))


def missing_fields(manifest) -> list[str]:
    """One line per field that is absent, empty, still TODO or malformed."""
    if not isinstance(manifest, dict):
        return [f"the manifest is a {type(manifest).__name__}, not a table (dict)"]
    lines = [f"{field}: missing; {what}" for field, what in FIELDS
             if _blank(_lookup(manifest, field))]
    kind = _lookup(manifest, "capstone.kind")
    if not _blank(kind) and kind not in KINDS:
        lines.append(f"capstone.kind: {kind!r} is none of {', '.join(repr(k) for k in KINDS)}")
    venue = _lookup(manifest, "capstone.venue")
    if not _blank(venue) and not str(venue).startswith("https://"):
        lines.append(f"capstone.venue: {venue!r} is not an https:// URL")
    for table, keys in (("targets", TARGET_KEYS), ("cases", CASE_KEYS)):
        rows = _lookup(manifest, table)
        if _blank(rows):
            continue
        if not isinstance(rows, list):
            lines.append(f"{table}: must be an array of tables ([[{table}]])")
            continue
        for n, row in enumerate(rows):
            absent = [k for k in keys if not isinstance(row, dict) or k not in row]
            if absent:
                lines.append(f"{table}[{n}]: missing {', '.join(absent)}")
    return lines


def resolve(path: str):
    """The object a `package.module:attribute` path names; a WrongResult saying why not."""
    module_name, _, attribute = str(path).partition(":")
    if not module_name or not attribute:
        raise WrongResult(f"{path!r} is not of the form package.module:attribute")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any import failure is the manifest's to fix
        raise WrongResult(f"{path!r}: importing {module_name} raised "
                          f"{type(error).__name__}: {error}") from None
    if not hasattr(module, attribute):
        raise WrongResult(f"{path!r}: {module_name} has no attribute {attribute}")
    return getattr(module, attribute)


def reference(manifest: dict, **options) -> Reference:
    """(out, lse) oracle and floor of the manifest, with the case's options bound."""
    from ..references import Reference

    return Reference("the manifest's oracle and floor", resolve(manifest["baselines"]["oracle"]),
                     resolve(manifest["baselines"]["floor"])).bind(**options)


def output_only(ref: Reference) -> Reference:
    """The same op returning out alone: what the differentiable kernel returns."""
    from ..references import Reference

    return Reference(f"{ref.name}, out only", lambda *a, **k: ref.oracle(*a, **k)[0],
                     lambda *a, **k: ref.floor(*a, **k)[0])


@dataclasses.dataclass(frozen=True)
class Case:
    """One differential-suite case: shapes, dtype, blocks and the variant's options."""

    name: str
    q_len: int
    kv_len: int
    head_dim: int
    dtype: str
    block_q: int
    block_kv: int
    options: tuple  # sorted (key, value) pairs: hashable, so cases dedupe
    batch: int = 1
    heads: int = 2
    grads: bool = False
    q_scale: float = 1.0  # q multiplied by this: larger logits
    why: str = ""

    @classmethod
    def from_table(cls, row: dict) -> "Case":
        return cls(name=row["name"], q_len=int(row["q_len"]), kv_len=int(row["kv_len"]),
                   head_dim=int(row["head_dim"]), dtype=str(row["dtype"]),
                   block_q=int(row["block_q"]), block_kv=int(row["block_kv"]),
                   options=tuple(sorted(dict(row["options"]).items())),
                   batch=int(row.get("batch", 1)), heads=int(row.get("heads", 2)),
                   grads=bool(row.get("grads", False)), q_scale=float(row.get("q_scale", 1.0)),
                   why=str(row.get("why", "")))

    @property
    def kwargs(self) -> dict:
        return dict(self.options)

    def arrays(self, seed: int):
        """(q, k, v) drawn from the seed, q scaled by q_scale."""
        from ..strategies import random_array

        q_shape, kv_shape = self.shapes()
        q = random_array(q_shape, self.dtype, seed, scale=self.q_scale)
        return q, random_array(kv_shape, self.dtype, seed + 1), random_array(kv_shape, self.dtype, seed + 2)

    @property
    def blocks(self) -> dict:
        return dict(block_q=self.block_q, block_kv=self.block_kv)

    def shapes(self):
        return ((self.batch, self.heads, self.q_len, self.head_dim),
                (self.batch, self.heads, self.kv_len, self.head_dim))

    def __str__(self) -> str:
        options = ", ".join(f"{k}={v}" for k, v in self.options)
        return (f"{self.name}: q {self.shapes()[0]}, kv {self.shapes()[1]}, {self.dtype}, "
                f"block_q {self.block_q}, block_kv {self.block_kv}, {options}")


def cases(manifest: dict) -> list[Case]:
    """The manifest's [[cases]]; a WrongResult naming what is missing when there are none or a
    row is malformed (a learner's manifest is often half written)."""
    rows = manifest.get("cases") if isinstance(manifest, dict) else None
    if not rows or not isinstance(rows, list):
        raise WrongResult("the manifest lists no corner cases: add [[cases]] tables to capstone.toml "
                          "(README, \"The manifest\": name, why, q_len, kv_len, head_dim, dtype, "
                          "block_q, block_kv, options)")
    found = []
    for n, row in enumerate(rows):
        try:
            found.append(Case.from_table(row))
        except (KeyError, TypeError, ValueError) as error:
            missing = [k for k in CASE_KEYS if not isinstance(row, dict) or k not in row]
            why = f"missing {', '.join(missing)}" if missing else f"{type(error).__name__}: {error}"
            raise WrongResult(f"cases[{n}] of the manifest cannot be read: {why}") from None
    return found


def _window_case(name, q_len, kv_len, head_dim, dtype, block_q, block_kv, window, **extra):
    return Case(name=name, q_len=q_len, kv_len=kv_len, head_dim=head_dim, dtype=dtype,
                block_q=block_q, block_kv=block_kv, options=(("window", window),), **extra)


# The sliding-window kernel's corner cases, graded against the course's own oracle
# (references.SLIDING_WINDOW_ATTENTION_WITH_LSE) whatever a manifest lists.
WINDOW_CASES = (
    _window_case("unequal blocks, window not a multiple of a block", 512, 512, 64, "float32",
                 128, 64, 200, grads=True),
    _window_case("bf16, q shorter than kv, blocks the other way round", 256, 512, 128, "bfloat16",
                 64, 128, 96, grads=True),
    _window_case("window of one key, two batches", 256, 256, 64, "float32", 128, 128, 1, batch=2),
    _window_case("window longer than the sequence", 256, 256, 64, "bfloat16", 128, 128, 4096),
    _window_case("one block, shorter than the default block", 64, 64, 64, "float32", 128, 128, 16),
    _window_case("long sequence, large logits", 1024, 1024, 64, "float32", 256, 128, 384,
                 q_scale=30.0),
)

# The corner case whose q blocks are narrower than a vector register's 128 lanes: a row statistic
# written as one (1, block_q) block of a (B, H, 1, Sq) array is refused by Pallas's TPU lowering there.
SMALL_Q_BLOCKS = WINDOW_CASES[1]


def _problem(case: Case) -> tuple:
    return (case.q_len, case.kv_len, case.head_dim, case.dtype, case.block_q, case.block_kv,
            case.options, case.q_scale, case.batch, case.heads)


def extra_cases(manifest: dict, graded=WINDOW_CASES) -> list[Case]:
    """The manifest's cases that the course's own list does not already run."""
    seen = {_problem(c) for c in graded}
    return [c for c in cases(manifest) if _problem(c) not in seen]
