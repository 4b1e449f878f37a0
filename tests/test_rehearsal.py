"""A rehearsal of the gates (pytest --gates --rehearse): the measuring path on a stand-in clock,
rows marked rehearsal that go only to a throwaway file and that no reader counts."""

import pytest

from pytest_tpucourse import chips, roofline
from pytest_tpucourse.gates import criteria, judge, report
from pytest_tpucourse.gates import records as rec
from pytest_tpucourse.gates.rehearsal import STAND_IN_CALL_SECONDS, Rehearsal, StandInHarness

from .gate_helpers import ADD_GATE_TEST, gate_run, make_record


def _rehearsal_row(**kw):
    return make_record(**{**dict(rehearsal=True, method="off-chip-verified", gate=1, criterion="correct",
                                 chapter="ch11", implementation="kernel", statistic="checks-passed", value=1.0,
                                 unit="check", verdict="pass", interpret=True), **kw})


def test_a_rehearsal_row_goes_only_to_a_rehearsal_file_and_nothing_else_goes_there(tmp_path):
    with pytest.raises(rec.HonestyError, match="a rehearsal row goes only to a \\*.rehearsal.jsonl file"):
        rec.append(tmp_path / "records.jsonl", _rehearsal_row())
    with pytest.raises(rec.HonestyError, match="only rehearsal rows go there"):
        rec.append(tmp_path / f"x{rec.REHEARSAL_SUFFIX}", make_record())
    assert not (tmp_path / "records.jsonl").exists()


def test_no_reader_counts_a_rehearsal_row(tmp_path):
    """Even copied by hand into the learner's records, a rehearsal row is rejected on read."""
    path = tmp_path / "records.jsonl"
    path.write_text(_rehearsal_row().to_json() + "\n")
    loaded = report.load([path], chips.ChipRegistry())
    assert not loaded.accepted
    assert "a rehearsal row (pytest --gates --rehearse: a stand-in clock, no chip) never counts" in loaded.problems()[0]
    judged = judge.judge_rows(rec.read(path).rows, chips.ChipRegistry(), rehearsal=True)
    assert len(judged.accepted) == 1  # the rehearsal itself re-judges its own rows


def test_the_real_harness_runs_its_rounds_on_the_stand_in_clock():
    calls = []
    timings = StandInHarness().measure({"floor": lambda x: calls.append(("floor", x)),
                                        "kernel": lambda x: calls.append(("kernel", x))}, [(0,), (1,), (2,)])
    for name, t in timings.items():
        assert t.summary.median == pytest.approx(STAND_IN_CALL_SECONDS) and t.stopped == "interval"
        assert len(t.samples) == 10 and t.calls_per_sample == 1
        # every input set called once before timing, three warm-up calls, one per round
        assert sum(1 for n, _ in calls if n == name) == 3 + 3 + 10


def test_a_rehearsed_trio_writes_rehearsal_rows_that_judge_as_a_chips(tmp_path):
    rehearsal = Rehearsal(path=tmp_path / f"t{rec.REHEARSAL_SUFFIX}")
    run = gate_run(tmp_path, gate=1, platform="cpu", device_kind="cpu", harness=rehearsal.harness,
                   rehearsal=rehearsal)
    slot = criteria.gate(1).criterion("matmul-near-xla").slots[0]
    assert run.on_accelerator and run.shapes(slot.shapes, cpu=[(8, 8), (8, 8)]) == [(8, 8), (8, 8)]
    result = run.measure_trio("matmul-near-xla", slot.op, slot.shapes, slot.dtype, roofline.Cost(1e9, 1e6),
                              floor=lambda x: x * 2, kernel=lambda x: x * 2, ceiling=None,
                              inputs=lambda seed: (float(seed),))
    assert result.status == "pass" and result.timed
    rows = rec.read(rehearsal.path).records
    assert {r.rehearsal for r in rows} == {True} and {r.platform for r in rows} == {"cpu"}
    assert [r.method for r in rows] == ["roofline-predicted", "measured", "measured"]
    assert "rehearsal on a stand-in clock, at 4096x4096 · 4096x4096 -> 8x8 · 8x8" in rows[1].notes
    judged = judge.judge_rows(rec.read(rehearsal.path).rows, chips.ChipRegistry(), rehearsal=True)
    assert len(judged.accepted) == 3 and not judged.rejected
    assert not report.load([rehearsal.path], chips.ChipRegistry()).accepted


def test_a_rehearsal_names_its_file_prints_each_test_and_writes_no_record(fake_course):
    fake_course.test_file(ADD_GATE_TEST, "test_gate.py")
    fake_course.test_file("""
        import pytest

        @pytest.mark.gate(0)
        def test_broken(gate_run):
            gate_run.measure_floor("roofline-predicts", "add", [(8, 8)], "bfloat16", None, None,
                                   input_sets=[])
    """, "test_gate_broken.py")
    result = fake_course.run("--gates", "--rehearse", "--chip=v5e")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*REHEARSAL of the gates for chip v5e on cpu*stand-in clock*no number about any chip*rehearsal.jsonl*",
        "*tpucourse rehearsal*",
        "  ran through  exercises/ch11/test_gate.py::test_add_near_floor",
        "  ERROR        exercises/ch11/test_gate_broken.py::test_broken: exercises/ch11/test_gate_broken.py:6: "
        "TypeError: GateRun.measure_floor() got an unexpected keyword argument 'input_sets'",
        "rehearsal rows: 2 written to *gates.rehearsal.jsonl (marked rehearsal*re-judged as a chip's: 2 accepted, 0 "
        "rejected*",
        "rehearsal: 1/2 gate tests ran through",
    ])
    assert "gates: " not in result.stdout.str()  # no gate table: no status is read from rehearsal rows
    assert not (fake_course.pytester.path / rec.DEFAULT_PATH).exists()
    assert fake_course.run("--rehearse").ret == pytest.ExitCode.USAGE_ERROR
    assert fake_course.run("--gates", "--rehearse", "--records", "r.jsonl").ret == pytest.ExitCode.USAGE_ERROR


def test_the_readme_quotes_the_rehearsals_logged_times():
    """README.md's times for `pytest --gates --rehearse` are bench/rehearsal_times.log's."""
    import re

    from .support import REPO

    logged = dict(re.findall(r"^all gates\s+(stubs|solutions)\s+([\d.]+ s)", (REPO / "bench" / "rehearsal_times.log")
                             .read_text(encoding="utf-8"), re.M))
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert f"it took {logged['stubs']} on untouched stubs and {logged['solutions']} with the shipped solutions" in readme


# ---------------------------------------------------------------- what the chip would refuse


def _matmul_at_1024_blocks(vmem_limit_bytes=None):
    """A matmul whose 1024 blocks shrink to small arrays: what the chip compiles depends on the size."""
    from pytest_tpucourse.checking import compiler_figures

    def matmul(x, y):
        (m, k), n = x.shape, y.shape[1]
        return compiler_figures.matmul_schedule(min(1024, m), min(1024, k), min(1024, n),
                                                vmem_limit_bytes=vmem_limit_bytes)(x, y)
    return matmul


def test_the_timed_kernel_is_compiled_for_the_chip_at_the_gates_shapes():
    """At the CPU's 512² its 1024 blocks shrink and fit; at the gate's 2048² each is double-buffered
    and the v5e compiler refuses the 18.36 MiB: the refusal gives the bytes and the fix. The same
    kernel asking for the VMEM it needs compiles."""
    import jax.numpy as jnp

    from pytest_tpucourse.compiler import libtpu
    from pytest_tpucourse.gates import chip_compile

    libtpu.skip_unless_available()
    cpu = (jnp.zeros((512, 512), jnp.bfloat16),) * 2
    scaled = [([(2048, 2048), (2048, 2048)], [(512, 512), (512, 512)])]
    v5e = chips.get_chip("v5e")
    refused = chip_compile.at_gate_size(_matmul_at_1024_blocks(), cpu, scaled, v5e).refused
    assert refused is not None, "compiled at the CPU's shapes, not the gate's"
    for said in ("would not compile for a v5e TPU at the gate's size (2048x2048 · 2048x2048)", "18.36 MiB",
                 "16.00 MiB (E1001 CompileTimeScopedVmemOom)", "vmem_limit_bytes"):
        assert said in refused, refused
    accepted = chip_compile.at_gate_size(_matmul_at_1024_blocks(32 * 2 ** 20), cpu, scaled, v5e)
    assert accepted.refused is None and "compiled for v5e at 2048x2048 · 2048x2048" in accepted.note
    assert chip_compile.at_gate_size(_matmul_at_1024_blocks(), cpu, [], v5e).refused is None  # unscaled: 512²


def test_inputs_the_gate_did_not_scale_are_not_compiled_at_a_guessed_size():
    import jax.numpy as jnp

    from pytest_tpucourse.gates import chip_compile

    args = (jnp.zeros((512, 512)), jnp.zeros((8,)))
    compiled = chip_compile.at_gate_size(lambda x, y: x, args, [((4096, 4096), (512, 512))], chips.get_chip("v5e"))
    assert compiled.refused is None and "not compiled for v5e: the input of shape 8 is not one the gate scaled" in \
        compiled.note


def test_a_rehearsed_trio_fails_on_what_the_chip_would_not_compile_and_times_nothing(tmp_path, monkeypatch):
    from pytest_tpucourse.gates import chip_compile

    seen = []

    def refuse(fn, args, scaled, chip):
        seen.append((scaled, chip.name))
        return chip_compile.Compiled("the timed kernel would not compile for a v5e TPU at the gate's size", "")
    monkeypatch.setattr(chip_compile, "at_gate_size", refuse)
    rehearsal = Rehearsal(path=tmp_path / f"t{rec.REHEARSAL_SUFFIX}")
    run = gate_run(tmp_path, gate=1, platform="cpu", device_kind="cpu", harness=rehearsal.harness,
                   rehearsal=rehearsal)
    slot = criteria.gate(1).criterion("matmul-near-xla").slots[0]
    run.shapes(slot.shapes, cpu=[(8, 8), (8, 8)])
    result = run.measure_trio("matmul-near-xla", slot.op, slot.shapes, slot.dtype, roofline.Cost(1e9, 1e6),
                              floor=lambda x: x * 2, kernel=lambda x: x * 2, ceiling=None,
                              inputs=lambda seed: (float(seed),))
    assert seen == [([(slot.shapes, [(8, 8), (8, 8)])], "v5e")]  # the gate's shapes and the CPU's, for the chip
    assert result.status == criteria.FAIL and not result.timed and "would not compile" in result.message
    assert [r.method for r in rec.read(rehearsal.path).records] == ["roofline-predicted"]  # nothing timed


def test_a_stubs_rehearsal_says_todo(fake_course):
    """A gate test whose timed kernel is still the stub is TODO in a rehearsal, as its correctness test is."""
    fake_course.pytester.makepyfile(**{"exercises/ch11/stubbed.py": """
        def kernel(x):
            raise NotImplementedError("write kernel()")
    """})
    fake_course.test_file("""
        import jax
        import jax.numpy as jnp
        import pytest
        import importlib.util, pathlib
        from pytest_tpucourse import roofline

        spec = importlib.util.spec_from_file_location("stubbed", pathlib.Path(__file__).with_name("stubbed.py"))
        stubbed = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(stubbed)
        kernel = stubbed.kernel

        @pytest.mark.gate(1)
        def test_timed(gate_run):
            x = jnp.ones((8, 128), jnp.bfloat16)
            gate_run.measure_trio("matmul-near-xla", "matmul", [(4096, 4096), (4096, 4096)], "bfloat16",
                                  roofline.Cost(1e9, 1e6), floor=lambda a: a, kernel=jax.jit(kernel), ceiling=None,
                                  inputs=lambda seed: (x,))
    """, "test_gate_stub.py")
    result = fake_course.run("--gates", "--rehearse", "--chip=v5e", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([
        "gate 01: 1 test, nothing timed, 1 todo, *",
        "  TODO         exercises/ch11/test_gate_stub.py::test_timed: the timed kernel is not written yet: "
        "*stubbed.py raises NotImplementedError (write kernel())",
    ])
    assert "could not be traced" not in result.stdout.str()


def test_a_compile_stopped_by_its_timeout_is_no_refusal(monkeypatch):
    """A loaded machine's compile that outlives its timeout says nothing about the chip: noted, not failed."""
    import jax.numpy as jnp

    from pytest_tpucourse.compiler import libtpu
    from pytest_tpucourse.gates import chip_compile

    def stopped(*args, **kwargs):
        raise libtpu.TpuCompileError("the compiler did not finish within 120 s", kind="timeout", code=None,
                                     kernel=None, chip_name="v5e", detail="")
    monkeypatch.setattr(libtpu, "available", lambda: True)
    monkeypatch.setattr(libtpu, "compile_for", stopped)
    compiled = chip_compile.at_gate_size(lambda x: x, (jnp.zeros((8, 128)),), [], chips.get_chip("v5e"))
    assert compiled.refused is None and "not compiled for v5e at 8x128: the compiler did not finish" in compiled.note
