"""The six instruments' data, computed with the package's own code.

Each function returns plain JSON-able data: the static build embeds it in the instrument's
page, and the local server (`--serve`) answers the same functions live for any input. Every
number carries what it is: a roofline prediction (chips.py, roofline.py, ici.py), an exact
computation (NumPy, float64), a rule of the TPU lowering (blockspecs.py), or a simulation of
the semaphore model (timeline.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .. import chips, roofline
from ..gates import criteria
from ..instruments import ici
from ..instruments import semaphore_timeline as timeline

ROOFLINE_DTYPES = ("bfloat16", "float32", "int8")
# The course's three v5e floors (the home page's): gate 00's slots, named as the course names them.
SEED_OP_NAMES = ("matmul NxNxN", "matmul skinny 8xNxN", "elementwise add")
PREDICTED = "roofline-predicted"


# ---------------------------------------------------------------- EX·01 the roofline playground


def seed_ops() -> list[dict]:
    """Gate 00's three slots (matmul 4096³, skinny 8×4096×4096, add 4096²) with their FLOPs and bytes."""
    slots = criteria.gate(0).criteria[0].slots
    out = []
    for name, slot in zip(SEED_OP_NAMES, slots):
        cost = roofline.operand_cost(slot.op, slot.shapes, slot.dtype)
        shape = (slot.shapes[0][0], slot.shapes[0][1], slot.shapes[1][1]) if slot.op == "matmul" \
            else slot.shapes[0]
        out.append({"name": name, "op": slot.op, "shape": "x".join(map(str, shape)), "dtype": slot.dtype,
                    "flops": cost.flops, "bytes": cost.bytes})
    return out


def chip_figures(name: str) -> dict:
    """One JAX device's figures (what a kernel timed on one device is judged against), and their sources."""
    chip = chips.get_chip(name)
    device = chip.per_device()
    return {"name": chip.name, "device": device.name, "kind": chip.kind,
            "peaks": dict(device.peaks), "hbm_bandwidth": device.hbm_bandwidth,
            "ridge_bf16": device.peak_for("bfloat16") / device.hbm_bandwidth,
            "sources": {k: chip.sources[k] for k in ("peak_flops", "hbm_bandwidth") if k in chip.sources}}


def predict(chip_name: str, op: str, shape: str, dtype: str = "bfloat16") -> dict:
    """roofline.py's prediction for an op of the command line (`tpucourse roofline`), as data."""
    device = chips.get_chip(chip_name).per_device()
    prediction = roofline.predict(device, roofline.op_cost(op, roofline.parse_shape(shape), dtype), dtype)
    return {"what": PREDICTED, "chip": chip_name, "op": op, "shape": shape, "dtype": dtype,
            "flops": prediction.flops, "bytes": prediction.bytes, "floor_seconds": prediction.floor_seconds,
            "bound": prediction.bound, "intensity": prediction.intensity, "ridge": prediction.ridge}


def roofline_data() -> dict:
    return {"chips": [chip_figures(name) for name in chips.KNOWN_CHIPS], "default_chip": chips.DEFAULT_CHIP,
            "ops": seed_ops(), "dtypes": {d: roofline.itemsize(d) for d in ROOFLINE_DTYPES},
            "families": {d: chips.dtype_family(d) for d in ROOFLINE_DTYPES}}


# ---------------------------------------------------------------- EX·03 streaming attention


def streaming_attention(q_rows: int = 4, head_dim: int = 4, kv_blocks: int = 4, block: int = 4, seed: int = 0,
                        *, causal: bool = False, q_block: int = 0) -> dict:
    """One q block streaming over kv blocks (chapter 5's online softmax; causal, chapter 13's flash forward
    with block skipping): the carried (m, l, acc) after every block, exact in float64, and the softmax
    of the whole score matrix it must equal. A kv block wholly above the diagonal is skipped."""
    import numpy as np

    rng = np.random.default_rng(seed)
    q = rng.normal(size=(q_rows, head_dim))
    k = rng.normal(size=(kv_blocks * block, head_dim)) * 1.5
    v = rng.normal(size=(kv_blocks * block, head_dim))
    scale = head_dim ** -0.5
    rows = q_block * q_rows + np.arange(q_rows)  # the queries' positions in the sequence
    allowed = (rows[:, None] >= np.arange(kv_blocks * block)[None, :]) if causal \
        else np.ones((q_rows, kv_blocks * block), bool)
    m = np.full(q_rows, -np.inf)
    l = np.zeros(q_rows)
    acc = np.zeros((q_rows, head_dim))
    steps = []
    for j in range(kv_blocks):
        keys = slice(j * block, (j + 1) * block)
        if not allowed[:, keys].any():  # above the diagonal: neither fetched nor computed
            steps.append({"block": j, "skipped": True, "alpha": [1.0] * q_rows, "m": m.tolist(), "l": l.tolist(),
                          "acc": acc.tolist(), "out": (acc / l[:, None]).tolist()})
            continue
        s = np.where(allowed[:, keys], (q @ k[keys].T) * scale, -np.inf)
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)  # exp(-inf) = 0 on the first block: nothing carried yet
        p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ v[keys]
        m = m_new
        steps.append({"block": j, "skipped": False, "alpha": alpha.tolist(), "m": m.tolist(), "l": l.tolist(),
                      "acc": acc.tolist(), "out": (acc / l[:, None]).tolist()})
    full = np.where(allowed, q @ k.T * scale, -np.inf)
    weights = np.exp(full - full.max(axis=1, keepdims=True))
    reference = (weights / weights.sum(axis=1, keepdims=True)) @ v
    error = float(np.abs(acc / l[:, None] - reference).max())
    return {"what": "computed exactly (NumPy, float64), not a kernel run", "q_rows": q_rows, "q_block": q_block,
            "causal": causal, "head_dim": head_dim, "kv_blocks": kv_blocks, "block": block, "steps": steps,
            "allowed": allowed.tolist(), "reference": reference.tolist(), "max_error": error}


def streaming_variants() -> dict:
    """The instrument's two walks: chapter 5's (every kv block) and chapter 13's causal one (q block 1)."""
    return {"default": "full", "variants": {
        "full": {"label": "chapter 5: online softmax, every kv block", **streaming_attention()},
        "causal": {"label": "chapter 13: causal flash forward, q block 1 (blocks above the diagonal skipped)",
                   **streaming_attention(causal=True, q_block=1)}}}


# ---------------------------------------------------------------- EX·09 the BlockSpec sandbox

BLOCKSPEC_SHAPES = ("1024x1024", "1000x384", "512x256", "4096")
BLOCKSPEC_BLOCKS = ("128x128", "256x512", "8x128", "100x128", "128x100", "Nonex128", "1024x1024", "4096",
                    "1024", "384")
BLOCKSPEC_DTYPES = ("float32", "bfloat16", "int8")


def blockspec(shape: str, block: str, dtype: str, *, compiler: bool) -> dict:
    """The sandbox's report (`tpucourse blockspec`); compiler=True adds the real compiler's verdict."""
    from ..instruments.blockspec_sandbox import parse_block, sandbox

    array = parse_block(shape)
    if None in array:
        raise ValueError(f"an array shape takes sizes only, got {shape!r}")
    report = sandbox(array, parse_block(block), dtype, compiler=compiler)
    return {"shape": shape, "block": block, "dtype": dtype,
            "legal": report.error is None and report.compiled is not False, "compiled": report.compiled,
            "headline": report.headline, "grid": list(report.grid), "lines": report.lines(),
            "what": "the TPU lowering's verdict and the real compiler's (libtpu, ahead of time)" if compiler
            else "the TPU lowering's rules only (Pallas' Mosaic lowering, run on this CPU)"}


def blockspec_cases() -> list[dict]:
    """Every precomputed case of the static build: the shapes, blocks and dtypes of the fields' lists."""
    cases = []
    for shape in BLOCKSPEC_SHAPES:
        rank = len(shape.split("x"))
        for block in BLOCKSPEC_BLOCKS:
            if len(block.split("x")) != rank:
                continue
            for dtype in BLOCKSPEC_DTYPES:
                cases.append(blockspec(shape, block, dtype, compiler=False))
    return cases


# ---------------------------------------------------------------- EX·10 the semaphore timeline

TIMELINE_DEVICES = (2, 4, 8)
TIMELINE_MAX_DEVICES = 16  # a column per device: the page's table holds 16
LEARNER_TIMELINE = Path("exercises") / "ch14" / "timeline.py"


def timeline_devices(text: str) -> int:
    """A device count the timeline's table can show, or ValueError saying which it can."""
    if not text.strip().isdigit() or not 1 <= int(text) <= TIMELINE_MAX_DEVICES:
        raise ValueError(f"devices={text!r}: the timeline shows 1 to {TIMELINE_MAX_DEVICES} devices, a column each")
    return int(text)


def timeline_of(programs, result: timeline.Timeline) -> dict:
    deadlock = None
    if result.deadlock is not None:
        d = result.deadlock
        deadlock = {"device": d.device, "step": d.step, "sem": d.sem, "wants": d.wants, "holds": d.holds}
    return {"ops": [[timeline.label(op) for op in ops] for ops in programs],
            "rounds": [list(r) for r in result.rounds], "deadlock": deadlock,
            "leftover": [list(x) for x in result.leftover], "summary": timeline.summary(result)}


def timeline_data() -> dict:
    """Every shipped schedule at 2, 4 and 8 devices, simulated by the course's timeline.run."""
    schedules = {}
    for name, build in timeline.SCHEDULES.items():
        runs = {}
        for devices in TIMELINE_DEVICES:
            programs = build(devices)
            runs[str(devices)] = timeline_of(programs, timeline.run(programs))
        schedules[name] = {"doc": build.__doc__.strip().splitlines()[0], "runs": runs}
    return {"what": "simulated round by round (the course's semaphore model, timeline.py), not a TPU run",
            "schedules": schedules, "default": "exchange-deadlock"}


_LEARNER_SIMULATE = """
import importlib.util, json, sys
from pytest_tpucourse.instruments import semaphore_timeline as timeline
from pytest_tpucourse.site.instruments import timeline_of
path, name, devices = sys.argv[1], sys.argv[2], int(sys.argv[3])
spec = importlib.util.spec_from_file_location("_learner_timeline", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
programs = timeline.SCHEDULES[name](devices)
try:
    result = module.simulate(programs)
except NotImplementedError as error:
    print(json.dumps({"error": f"your simulate() is not written yet: {error}"}))
    sys.exit(0)
print(json.dumps(timeline_of(programs, result)))
"""


def learner_timeline(course_root: Path, name: str, devices: int, timeout: float = 120.0) -> dict:
    """A shipped schedule played by the learner's own simulate() (exercises/ch14/timeline.py), in a
    child process with a deadline: the learner's code may raise, return nonsense or never return."""
    if name not in timeline.SCHEDULES:
        raise ValueError(f"no shipped schedule {name!r}")
    timeline_devices(str(devices))
    path = Path(course_root) / LEARNER_TIMELINE
    if not path.is_file():
        return {"error": f"{path} does not exist"}
    try:
        done = subprocess.run([sys.executable, "-P", "-c", _LEARNER_SIMULATE, str(path), name, str(devices)],
                              capture_output=True, text=True, timeout=timeout, cwd=course_root)
    except subprocess.TimeoutExpired:
        return {"error": f"your simulate() in {path.name} did not return within {timeout:.0f} s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"your simulate() in exercises/ch14/timeline.py failed: {last}"}
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"error": "your simulate() returned something that is not a Timeline"}
    answer["what"] = "simulated by your simulate() (exercises/ch14/timeline.py)"
    return answer


# ---------------------------------------------------------------- EX·11 the mesh

MESH_CHIPS = ("v5e", "v6e", "v5p", "v4")
MESH_TOPOLOGIES = {"v5e": ("4", "8", "16", "2x2", "4x4", "4x8", "16x16"),
                   "v6e": ("4", "8", "16", "2x2", "4x4", "4x8", "16x16"),
                   "v5p": ("4", "8", "2x2", "4x4", "4x4x4", "2x2x2"),
                   "v4": ("4", "8", "2x2", "4x4", "4x4x4", "2x2x2")}
MESH_BYTES = ("64MiB", "1GiB")
# The mesh picture (static/mesh.js draws it so): axis 0 across, the planes of axis 2 side by side with
# a gap of MESH_PLANE_GAP chips, axis 1 down; MESH_ACROSS by MESH_DOWN pixels, chips at least
# MESH_MIN_PITCH pixels apart. A slice that does not fit is refused before it is planned: a plan's
# steps grow as the square of an axis (100000x100000 would be terabytes).
MESH_LAYOUT = {"across": 600, "down": 300, "min_pitch": 8, "plane_gap": 1.5, "max_pitch": 70}


def parse_topology(text: str) -> tuple[int, ...]:
    parts = text.lower().replace("×", "x").split("x")
    if not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise ValueError(f"topology {text!r}: chips per axis, e.g. 4x4 or 4x4x4")
    return tuple(int(p) for p in parts)


def mesh_fits_the_page(axes: tuple[int, ...]) -> None:
    """ValueError, saying what fits, for a slice the page cannot draw."""
    if len(axes) > 3:
        raise ValueError(f"a slice of {len(axes)} axes: TPU slices have 1 to 3, and the page draws 3")
    d0, d1, d2 = (*axes, 1, 1)[:3]
    across = d0 * d2 + MESH_LAYOUT["plane_gap"] * (d2 - 1)
    pitch = MESH_LAYOUT["min_pitch"]
    most_across, most_down = MESH_LAYOUT["across"] // pitch, MESH_LAYOUT["down"] // pitch
    if across > most_across or d1 > most_down:
        raise ValueError(
            f"a {'x'.join(map(str, axes))} slice is past what the page can draw: it fits {most_across} chips "
            f"across (axis 0, times axis 2 with a gap between planes) and {most_down} down (axis 1); this one "
            f"needs {across:g} across and {d1} down")


def slice_words(chip: chips.Chip, axes: tuple[int, ...], wraps: tuple[bool, ...]) -> str:
    """What the slice is, from its wraparound links: a line, a ring, a mesh or a torus."""
    shape = "x".join(map(str, axes))
    ring, line = "a ring (wraparound link)", "a line (no wraparound link)"
    if len(axes) == 1:
        kind = ring if wraps[0] else line
    elif all(wraps):
        kind = f"a {len(axes)}D torus, every axis {ring}"
    elif not any(wraps):
        kind = f"a {len(axes)}D mesh, not a torus, every axis {line}"
    else:
        kind = ", ".join(f"axis {axis} {ring if wrap else line}" for axis, wrap in enumerate(wraps))
    return f"this {chip.name} {shape} slice: {kind} ({chip.name}: {ici.wraparound_rule(chip)})"


def _link_figure_source(chip: chips.Chip) -> str:
    """Where the link figure comes from, without the whole pod's topology the source adds."""
    source = chip.sources.get("ici", "")
    pod = getattr(chip, "topology", None)
    return source[: -len(pod) - 2] if pod and source.endswith(f", {pod}") else source


def mesh(chip_name: str, topology: str, op: str, size: str) -> dict:
    """ici.plan's phases of a collective over a slice, each with its steps hop by hop (`tpucourse mesh`)."""
    chip = chips.get_chip(chip_name)
    axes = parse_topology(topology)
    mesh_fits_the_page(axes)
    nbytes = ici.parse_bytes(size)
    wraparound = ici.wraparounds(chip, axes)
    bandwidth = ici.link_bandwidth(chip)
    phases = ici.plan(op, nbytes, axes, link_bandwidth=bandwidth, wraparound=wraparound)
    return {"what": "roofline prediction: link bandwidth only, every link busy every step; not a measurement",
            "chip": chip.name, "topology": list(axes), "op": op, "bytes": nbytes, "bytes_text": size,
            "slice": slice_words(chip, axes, wraparound),
            "link_bandwidth": bandwidth, "link_source": _link_figure_source(chip),
            "phases": [{"op": p.op, "axis": p.axis, "size": p.size, "wraparound": p.wraparound,
                        "chunk_bytes": p.chunk_bytes, "seconds": p.seconds,
                        "link_seconds": p.chunk_bytes / bandwidth,
                        "steps": [[list(send) for send in step] for step in p.schedule]} for p in phases],
            "seconds": sum(p.seconds for p in phases)}


def mesh_data() -> dict:
    plans = {}
    for chip_name in MESH_CHIPS:
        for topology in MESH_TOPOLOGIES[chip_name]:
            for op in ici.OPS:
                for size in MESH_BYTES:
                    plans[f"{chip_name}|{topology}|{op}|{size}"] = mesh(chip_name, topology, op, size)
    return {"chips": list(MESH_CHIPS), "topologies": MESH_TOPOLOGIES, "ops": list(ici.OPS),
            "sizes": list(MESH_BYTES), "plans": plans, "default": "v5e|4x4|all-gather|1GiB", "layout": MESH_LAYOUT}


# ---------------------------------------------------------------- EX·05 the IR x-ray


def xray_page() -> str:
    """The x-ray page (xray_render.page) of the site's example program: a matmul, a bias, a tanh, a softmax."""
    import jax
    import jax.numpy as jnp

    from ..instruments import xray_page as xray_render
    from . import xray_example

    shapes = [jax.ShapeDtypeStruct((8, 64), jnp.float32), jax.ShapeDtypeStruct((64, 32), jnp.float32),
              jax.ShapeDtypeStruct((32,), jnp.float32)]
    pic = xray_render.picture(xray_example.layer, shapes, "layer(float32[8, 64], float32[64, 32], float32[32])")
    return xray_render.page(pic)
