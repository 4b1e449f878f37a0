"""Roofline floors, and the course's v5e table to 0.1 us."""

import jax
import jax.numpy as jnp
import pytest

from pytest_tpucourse import chips, roofline
from pytest_tpucourse.roofline import Cost

V5E = chips.get_chip("v5e")


@pytest.mark.parametrize("op, shape, floor_us, bound", [
    ("matmul", (4096, 4096, 4096), 697.7, "compute"),
    ("matmul", (8, 4096, 4096), 41.1, "memory"),
    ("add", (4096, 4096), 122.8, "memory"),
])
def test_the_course_v5e_table(op, shape, floor_us, bound):
    prediction = roofline.predict(V5E, roofline.op_cost(op, shape, "bfloat16"))
    assert round(prediction.floor_seconds * 1e6, 1) == floor_us
    assert prediction.bound == bound


@pytest.mark.parametrize("op, shape, flops, nbytes", [
    ("softmax", (4096, 4096), 5 * 4096 ** 2, 2 * 4096 ** 2 * 2),
    ("layernorm", (4096, 4096), 7 * 4096 ** 2, (2 * 4096 ** 2 + 2 * 4096) * 2),
    ("matmul_bias_act", (4096, 4096, 4096), 2 * 4096 ** 3 + 2 * 4096 ** 2, (3 * 4096 ** 2 + 4096) * 2),
    ("attention-fwd", (1, 8, 8192, 8192, 128), 4 * 8 * 8192 ** 2 * 128, 4 * 8 * 8192 * 128 * 2),
    ("attention-causal-fwd-bwd", (1, 8, 8192, 8192, 128), 14 * 128 * 8 * (8192 * 8193 // 2),
     12 * 8 * 8192 * 128 * 2),  # forward: q, k, v, o; backward: q, o, dO, dq, k, v, dk, dv
])
def test_the_course_ops_on_the_command_line(op, shape, flops, nbytes):
    """Every op the course grades has a cost `tpucourse roofline --op` can price."""
    assert roofline.op_cost(op, shape, "bfloat16") == Cost(flops, nbytes)


def test_matmul_counts():
    cost = roofline.matmul_cost(8, 4096, 4096, "bfloat16")
    assert cost.flops == 2 * 8 * 4096 * 4096
    assert cost.bytes == 2 * (8 * 4096 + 4096 * 4096 + 8 * 4096)  # x, y and the output


def test_intensity_and_ridge():
    p = roofline.predict(V5E, roofline.matmul_cost(4096, 4096, 4096, "bfloat16"))
    assert p.intensity == pytest.approx(2 * 4096**3 / (3 * 2 * 4096**2))  # 1365.3
    assert p.ridge == pytest.approx(1.97e14 / 8.2e11)
    assert p.intensity > p.ridge and p.bound == "compute"


def test_estimate_cost_of_the_floor_agrees_with_the_analytic_count():
    x = jax.ShapeDtypeStruct((8, 4096), jnp.bfloat16)
    y = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)
    assert roofline.estimated_cost(jnp.matmul, x, y) == roofline.matmul_cost(8, 4096, 4096, "bfloat16")


def test_marker_cost():
    assert roofline.marker_cost(pytest.mark.roofline(flops=10, bytes=5).mark) == Cost(10, 5)
    assert roofline.marker_cost(pytest.mark.roofline(chip="v5e").mark) is None
    with pytest.raises(ValueError, match="give both flops= and bytes="):
        roofline.marker_cost(pytest.mark.roofline(flops=10).mark)


@pytest.mark.parametrize("call, message", [
    (lambda: roofline.parse_shape("4096by4096"), "not of the form"),
    (lambda: roofline.parse_shape("0x4"), "dim0 must be a positive integer"),
    (lambda: roofline.op_cost("conv", (1, 2), "float32"), "unknown op 'conv'"),
    (lambda: roofline.op_cost("matmul", (4, 4), "float32"), "takes a 3-dimensional shape"),
    (lambda: Cost(-1, 4), "flops must be a finite number"),
    (lambda: Cost(0, 0), "no floor"),
])
def test_bad_inputs_name_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_parse_shape():
    assert roofline.parse_shape("8x4096X4096") == (8, 4096, 4096)


def test_attention_cost_counts_the_causal_pairs_and_the_backward():
    full = roofline.attention_cost(1, 1, 1024, 1024, 128, "bfloat16")
    causal = roofline.attention_cost(1, 1, 1024, 1024, 128, "bfloat16", causal=True)
    assert full.flops == 4 * 128 * 1024 * 1024
    assert causal.flops == full.flops * 1025 // 2048  # (S + 1) / 2S of the pairs
    assert causal.bytes == full.bytes == 4 * 1024 * 128 * 2  # q, k, v, o in bf16
    step = roofline.attention_cost(1, 1, 1024, 1024, 128, "bfloat16", backward=True)
    assert step.flops == 3.5 * full.flops
    assert step.bytes == full.bytes + 8 * 1024 * 128 * 2  # + q, o, dO, dq, k, v, dk, dv
    gqa = roofline.attention_cost(1, 4, 1024, 1024, 128, "bfloat16", kv_heads=1)
    assert gqa.bytes == (2 * 4 + 2 * 1) * 1024 * 128 * 2


@pytest.mark.parametrize("chip", ["v5e", "v6e", "v5p", "h100"])
@pytest.mark.parametrize("k, n", [(4096, 4096), (512, 8192), (1024, 384), (256, 256)])
def test_compute_bound_rows_is_the_first_row_count_whose_compute_time_is_the_longer(chip, k, n):
    c = chips.get_chip(chip)
    rows = roofline.compute_bound_rows(k, n, itemsize=2, peak_flops=c.peak_flops, hbm_bandwidth=c.hbm_bandwidth)

    def bound(m):
        return roofline.predict(c, roofline.matmul_cost(m, k, n, "bfloat16")).bound

    if rows is None:
        assert all(bound(m) == "memory" for m in (1, 10**3, 10**6, 10**9))
    else:
        assert bound(rows) == "compute" and (rows == 1 or bound(rows - 1) == "memory")


def test_compute_bound_rows_counts_a_tie_as_compute_and_says_when_no_row_count_will_do():
    # k = n = 2, itemsize 1, peak 1.5, bandwidth 1: compute 8m / 1.5, memory 4m + 4; equal at m = 3.
    assert roofline.compute_bound_rows(2, 2, itemsize=1, peak_flops=1.5, hbm_bandwidth=1) == 3
    # peak 2: compute 4m against memory 4m + 4, never the longer.
    assert roofline.compute_bound_rows(2, 2, itemsize=1, peak_flops=2, hbm_bandwidth=1) is None
