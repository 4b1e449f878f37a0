"""The package's shape: layers that only point down, no import circle, no two folders that
import each other, a toolkit of at most 12 top-level modules that graded code alone imports,
faces that export what they declare, the `tpucourse` subcommands as doors at the edge (one
module each in commands/, the only place argparse, print() and a command module are found),
and a map (docs/authoring.md section 9) that names every module.

The rule itself (LAYERS) and the import graph are bench/package_shape.py's, so the figure a
reader prints and the rule the suite keeps are one.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re

import pytest

from .support import REPO

PACKAGE_DIR = REPO / "pytest_tpucourse"


def _shape():
    spec = importlib.util.spec_from_file_location("package_shape", REPO / "bench" / "package_shape.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SHAPE = _shape()
KNOWN = SHAPE.modules(PACKAGE_DIR)
EAGER, LAZY = SHAPE.imports(KNOWN)
TOOLKIT = tuple(importlib.import_module("pytest_tpucourse").__all__)
FACES = ("ir", "tpu", "gating")


def _graded_files():
    for tree in ("exercises", "solutions"):
        yield from sorted((REPO / tree).rglob("*.py"))


def test_no_import_circle():
    assert SHAPE.circles(KNOWN, EAGER, LAZY) == []


def test_every_module_sits_in_a_layer_and_imports_only_below_or_beside_it():
    unlisted = sorted(n for n in KNOWN if SHAPE.layer_of(n) is None)
    assert not unlisted, f"add these to bench/package_shape.py LAYERS: {unlisted}"
    assert SHAPE.upward_imports(KNOWN, EAGER, LAZY) == []


def test_the_layer_rule_fails_on_an_upward_import():
    eager = {name: set(targets) for name, targets in EAGER.items()}
    eager["readers.traced_program"] = eager["readers.traced_program"] | {"grading.compiled"}
    assert ("readers.traced_program", "grading.compiled") in SHAPE.upward_imports(KNOWN, eager, LAZY)
    eager["grading.compiled"] = eager["grading.compiled"] | {"readers.traced_program"}
    assert SHAPE.circles(KNOWN, eager, LAZY)


def test_no_two_folders_import_each_other():
    assert SHAPE.folder_pairs(KNOWN, EAGER, LAZY) == []


def test_the_folder_rule_fails_on_two_folders_that_import_each_other():
    lazy = {name: set(targets) for name, targets in LAZY.items()}
    lazy["readers.blockspecs"] = lazy["readers.blockspecs"] | {"compiler.libtpu"}  # libtpu reads readers.mosaic
    pairs = SHAPE.folder_pairs(KNOWN, EAGER, lazy)
    assert [(a, b) for a, b, _ in pairs] == [("compiler", "readers")]
    assert ("readers.blockspecs", "compiler.libtpu") in pairs[0][2]
    assert ("compiler.libtpu", "readers.mosaic") in pairs[0][2]


# ---------------------------------------------------------------- the doors: commands/

COMMANDS_DIR = "commands"


def _trees(known) -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in known.items()}


TREES = _trees(KNOWN)


def _in_commands(name: str) -> bool:
    return SHAPE.folder_of(name) == COMMANDS_DIR


def _stdlib_importers(trees: dict[str, ast.Module], module: str) -> list[str]:
    """The modules that import `module` (a top-level name: "argparse"), anywhere in their source."""
    found = []
    for name, tree in trees.items():
        for node in ast.walk(tree):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            if any(n.split(".")[0] == module for n in names):
                found.append(name)
                break
    return sorted(found)


def _printers(trees: dict[str, ast.Module]) -> list[str]:
    """The modules that call print()."""
    return sorted(name for name, tree in trees.items()
                  if any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
                         for node in ast.walk(tree)))


def _without_doors(trees: dict[str, ast.Module]) -> list[tuple[str, list[str]]]:
    """(module, the functions it lacks) for each module of commands/ other than main.py that does not
    define both add_parser(subcommands) and run(args) at its top level."""
    lacking = []
    for name, tree in trees.items():
        if not _in_commands(name) or name in (COMMANDS_DIR, f"{COMMANDS_DIR}.main"):
            continue
        defined = {node.name: [a.arg for a in node.args.args] for node in tree.body
                   if isinstance(node, ast.FunctionDef)}
        missing = [f"{function}({argument})" for function, argument in (("add_parser", "subcommands"), ("run", "args"))
                   if defined.get(function, [None])[:1] != [argument]]
        if missing:
            lacking.append((name, missing))
    return lacking


def _command_importers(known, eager, lazy) -> list[tuple[str, str]]:
    """(importer, command module) for each module outside commands/ that imports one of commands/."""
    return sorted((name, target) for name in known if not _in_commands(name)
                  for target in eager[name] | lazy[name] if _in_commands(target))


def test_argparse_is_imported_only_in_commands():
    outside = [name for name in _stdlib_importers(TREES, "argparse") if not _in_commands(name)]
    assert not outside, f"argparse outside commands/ (a subcommand's parser is its module's add_parser): {outside}"


def test_the_argparse_rule_fails_on_a_room_that_builds_a_namespace():
    trees = dict(TREES, **{"site.server": ast.parse("def tick(body):\n    import argparse\n"
                                                    "    return argparse.Namespace(**body)\n")})
    assert "site.server" in _stdlib_importers(trees, "argparse")
    assert "site.server" in _stdlib_importers({"site.server": ast.parse("from argparse import Namespace")}, "argparse")


def test_only_commands_print():
    outside = [name for name in _printers(TREES) if not _in_commands(name)]
    assert not outside, f"print() outside commands/ (a room returns data or text; the command prints): {outside}"


def test_the_print_rule_fails_on_a_room_that_prints():
    trees = dict(TREES, **{"instruments.ici": ast.parse("def mesh(args):\n    print(args)\n")})
    assert "instruments.ici" in _printers(trees)


def test_every_command_module_has_add_parser_and_run():
    assert _without_doors(TREES) == []


def test_the_door_rule_fails_on_a_command_without_run():
    trees = dict(TREES, **{"commands.hint": ast.parse("def add_parser(subcommands):\n    pass\n\n\n"
                                                      "def main(args):\n    return 0\n")})
    assert _without_doors(trees) == [("commands.hint", ["run(args)"])]


def _unlisted(known, commands) -> list[str]:
    """The modules of commands/ (main.py aside) that are not in `commands` (main.COMMANDS), and the
    entries of `commands` that are not modules of commands/."""
    listed = [module.__name__.removeprefix("pytest_tpucourse.") for module in commands]
    modules = {name for name in known if _in_commands(name)} - {COMMANDS_DIR, f"{COMMANDS_DIR}.main"}
    return sorted(modules ^ set(listed)) + sorted({n for n in listed if listed.count(n) > 1})


def test_every_command_module_is_a_subcommand_of_main():
    from pytest_tpucourse.commands import main

    assert _unlisted(KNOWN, main.COMMANDS) == [], "commands/main.py COMMANDS and the modules of commands/ differ"


def test_the_listing_rule_fails_on_a_command_main_does_not_list():
    from pytest_tpucourse.commands import main, tick

    assert _unlisted(KNOWN, [c for c in main.COMMANDS if c is not tick]) == ["commands.tick"]
    assert _unlisted(KNOWN, [*main.COMMANDS, tick]) == ["commands.tick"]


def test_modules_outside_commands_import_no_command_module():
    assert _command_importers(KNOWN, EAGER, LAZY) == []


def test_the_command_import_rule_fails_on_a_room_that_calls_a_command():
    lazy = {name: set(targets) for name, targets in LAZY.items()}
    lazy["site.server"] = lazy["site.server"] | {"commands.tick"}
    assert _command_importers(KNOWN, EAGER, lazy) == [("site.server", "commands.tick")]


def test_at_most_twelve_top_level_modules():
    top = SHAPE.top_level_modules(KNOWN)
    assert len(top) <= 12, top


def test_the_toolkit_is_the_top_level_and_instruments():
    top = {n for n in SHAPE.top_level_modules(KNOWN)} - {"__init__", "plugin"}
    assert top == set(TOOLKIT) - {"instruments"}, (top, TOOLKIT)


def test_plugin_only_wires():
    assert len((PACKAGE_DIR / "plugin.py").read_text(encoding="utf-8").splitlines()) <= 250


@pytest.mark.parametrize("name", [n for n in TOOLKIT if n != "instruments"])
def test_each_toolkit_module_declares_what_it_exports(name):
    module = importlib.import_module(f"pytest_tpucourse.{name}")
    declared = getattr(module, "__all__", None)
    assert declared is not None, f"pytest_tpucourse/{name}.py has no __all__"
    missing = [n for n in declared if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"
    assert len(set(declared)) == len(declared)


@pytest.mark.parametrize("name", FACES)
def test_a_face_exports_exactly_what_it_declares(name):
    """A face re-exports; everything public in it is declared, and nothing else is there."""
    module = importlib.import_module(f"pytest_tpucourse.{name}")
    public = {n for n, value in vars(module).items() if not n.startswith("_")
              and type(value).__name__ != "module" and n != "annotations"}
    assert public == set(module.__all__)


def _toolkit_uses(path):
    """(imports of the package this file makes, attribute uses of faces) in a graded file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imports, bound = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pytest_tpucourse"):
            for alias in node.names:
                imports.append((node.module, alias.name))
                if node.module == "pytest_tpucourse":
                    bound[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Import):
            imports += [(alias.name, None) for alias in node.names if alias.name.startswith("pytest_tpucourse")]
    uses = [(bound[node.value.id], node.attr) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound]
    return imports, uses


def _allowed(module: str, name: str | None) -> bool:
    if module == "pytest_tpucourse":
        return name in TOOLKIT
    sub = module.removeprefix("pytest_tpucourse.")
    return sub.split(".")[0] in TOOLKIT


@pytest.mark.parametrize("path", list(_graded_files()), ids=lambda p: str(p.relative_to(REPO)))
def test_graded_code_imports_only_the_toolkit(path):
    imports, uses = _toolkit_uses(path)
    outside = [f"{m}{'.' + n if n else ''}" for m, n in imports if not _allowed(m, n)]
    assert not outside, f"{path.relative_to(REPO)} imports machinery: {outside}"
    for module_name, attribute in uses:
        module = importlib.import_module(f"pytest_tpucourse.{module_name}")
        if hasattr(module, "__all__"):
            assert attribute in module.__all__, (
                f"{path.relative_to(REPO)} uses {module_name}.{attribute}, which "
                f"pytest_tpucourse/{module_name}.py does not export")


def test_the_toolkit_check_fails_on_machinery():
    assert not _allowed("pytest_tpucourse.core", "jax_internals")
    assert not _allowed("pytest_tpucourse", "grading")
    assert _allowed("pytest_tpucourse.instruments.semaphore_timeline", "Signal")


def test_every_module_is_in_the_map():
    text = (REPO / "docs" / "authoring.md").read_text(encoding="utf-8")
    section = text[text.index("## 9. The package a chapter uses"):].split("```")[1]
    missing = []
    for name, path in KNOWN.items():
        if path.name == "__init__.py":
            continue
        relative = path.relative_to(PACKAGE_DIR)
        folder = f"{relative.parent.as_posix()}/" if relative.parent.name else None
        if folder is None:
            found = re.search(rf"^  {re.escape(relative.name)}\s", section, re.M)
        else:
            start = re.search(rf"^\s*{re.escape(folder)}\s", section, re.M)
            rest = section[start.end():] if start else ""
            found = start and re.search(rf"^\s+{re.escape(relative.name)}\s", rest.split("\n\n")[0], re.M)
        if not found:
            missing.append(relative.as_posix())
    assert not missing, f"docs/authoring.md section 9 does not name: {missing}"


# Where a module with logic is tested, when not in tests/test_<module>.py: modules tested through
# the command, the fixture or the check that uses them.
TESTED_THROUGH = {
    "grading.ahead": "test_programs_ahead.py", "learner.compiles_on_save": "test_programs_ahead.py",
    "instruments.overlap_budget": "test_gate04_overlap.py",
    "run.host_cpu": "test_placement.py",
    "diagnosis.causes": "test_diagnosis.py", "diagnosis.evidence": "test_diagnosis.py",
    "diagnosis.kernel_steps": "test_diagnosis.py", "diagnosis.replay": "test_diagnosis.py",
    "diagnosis.stepping": "test_diagnosis.py",
    "core.small_files": "test_earned.py", "grading.leftovers": "test_earned.py",
    "grading.solution_code": "test_earned.py", "grading.solution_reads": "test_earned.py",
    "grading.toolkit_guard": "test_earned.py",
    "learner.foreign_plugins": "test_earned.py", "learner.run_markers": "test_earned.py",
    "core.course_git": "test_shipped.py",
    "checking.compiler_figures": "test_libtpu.py", "checking.ir_answers": "test_xray.py",
    "checking.schedules": "test_blockspecs.py", "checking.tpu_rules": "test_distributed_checks.py",
    "checking.device_order": "test_distributed_checks.py",
    "commands.bench": "test_cli.py", "commands.blockspec": "test_blockspecs.py", "commands.confirm": "test_learner_cli.py",
    "core.untrusted_json": "test_classroom.py", "classroom.python_source": "test_classroom.py",
    "classroom.course_reach": "test_classroom.py", "classroom.normalised_code": "test_classroom.py",
    "classroom.solution_prints": "test_classroom.py", "classroom.report_budget": "test_classroom.py",
    "classroom.confirmed_unit": "test_learner_cli.py", "grading.unit_files": "test_state.py",
    "commands.compile": "test_libtpu.py", "commands.grade": "test_classroom.py",
    "commands.hint": "test_learner_cli.py", "commands.main": "test_cli.py", "commands.mesh": "test_ici.py",
    "commands.progress": "test_learner_cli.py", "commands.reset": "test_learner_cli.py",
    "commands.solution": "test_learner_cli.py", "commands.tick": "test_learner_cli.py",
    "commands.timeline": "test_semaphore_timeline.py",
    "checking.block_rules": "test_blockspecs.py", "compiler.block_verdict": "test_blockspecs.py",
    "instruments.blockspec_sandbox": "test_blockspecs.py", "learner.requests": "test_learner_cli.py",
    "learner.watch_targets": "test_watch.py", "learner.watch_run": "test_watch.py",
    "learner.run_history": "test_watch.py", "learner.telling": "test_watch.py", "classroom.trees": "test_classroom.py",
    "commands.new_chapter": "test_scaffold.py", "authoring.templates": "test_scaffold.py",
    "core.jax_internals": "test_grading_speed.py", "core.kept_files": "test_grading_speed.py",
    "core.outcomes": "test_bad_learner_code.py", "core.paths": "test_bad_learner_code.py",
    "core.profiles": "test_options_and_markers.py", "core.running_test": "test_bad_learner_code.py",
    "core.source_location": "test_xray.py", "gates.criteria": "test_gates.py", "gates.judge": "test_gates.py",
    "gates.markers": "test_options_and_markers.py", "gates.provenance": "test_records.py",
    "gates.report": "test_gates.py", "gates.run": "test_gates.py", "gates.results": "test_gates.py",
    "gates.context": "test_gates.py", "gates.floor": "test_gates.py",
    "gates.sampling": "test_timer.py", "gates.ceiling_sweep": "test_sweeps.py", "gates.stats": "test_timer.py",
    "gates.device_runs": "test_gate_runs.py", "gates.json_lines": "test_records.py",
    "gates.placement": "test_gate_compute_alone.py",
    "gates.multi_chip": "test_gate_compute_alone.py", "run.gate_progress": "test_gate_runs.py",
    "gating": "test_gates.py", "grading.backend": "test_devices.py", "grading.calls": "test_bad_learner_code.py",
    "grading.compiled": "test_grading_speed.py", "grading.context": "test_grading_speed.py",
    "grading.deadline": "test_deadlocks.py", "grading.interrupts": "test_survival.py",
    "grading.messages": "test_bad_learner_code.py", "grading.tree": "test_bad_learner_code.py",
    "grading.vmem": "test_survival.py", "instruments.capstone": "test_course.py",
    "instruments.roofline_plot": "test_cli.py", "instruments.xray_page": "test_xray_page.py",
    "ir": "test_package_shape.py", "learner.progress": "test_state.py", "learner.self_test": "test_learner_cli.py",
    "learner.status": "test_state.py", "learner.warm_runs": "test_watch.py",
    "learner.warm_process": "test_served_runs.py", "plugin": "test_options_and_markers.py",
    "prompt": "test_checks.py", "public_kernels": "test_grading_chapters.py",
    "readers.block_skipping": "test_blockspecs.py", "readers.call_keys": "test_grading_speed.py",
    "readers.compiled_collectives": "test_ici.py", "readers.hlo_text": "test_xray.py",
    "readers.mosaic": "test_blockspecs.py", "readers.reproduction": "test_checks.py",
    "readers.traced_program": "test_checks.py", "references": "test_tolerance.py",
    "run.hookspecs": "test_chips.py", "run.mutants": "test_grading_chapters.py",
    "run.session": "test_options_and_markers.py", "run.options": "test_options_and_markers.py", "strategies": "test_grading_chapters.py",
    "run.collection": "test_options_and_markers.py", "run.graded_call": "test_earned.py",
    "run.reports": "test_earned.py", "run.lifecycle": "test_earned.py", "run.summary": "test_state.py",
    "run.fixtures": "test_devices.py", "run.gate_tests": "test_gates.py", "run.registered_chips": "test_cli.py",
    "site.bench": "test_site.py", "site.build": "test_site.py",
    "site.instrument_pages": "test_site.py", "site.instruments": "test_site.py", "site.learner_view": "test_site.py",
    "site.markdown": "test_site.py", "site.pages": "test_site.py", "site.server": "test_site_server.py",
    "site.slow_work": "test_site_server.py",
    "site.xray_example": "test_site.py", "tpu": "test_package_shape.py",
    "classroom.gradebook": "test_classroom.py",
    "classroom.junit": "test_classroom.py",
    "classroom.progress_line": "test_classroom.py",
    "classroom.record": "test_classroom.py",
    "classroom.runner": "test_classroom.py",
    "classroom.shards": "test_classroom.py",
    "classroom.sandbox": "test_classroom.py",
    "classroom.bounded_log": "test_classroom.py",
    "classroom.escaping": "test_classroom.py",
    "classroom.signing": "test_classroom.py",
    "classroom.similarity": "test_classroom.py",
    "classroom.isolated": "test_trusted_check.py",
    "classroom.tree_runner": "test_trusted_check.py",
    "classroom.trusted_worker": "test_trusted_check.py",
    "core.plain_data": "test_trusted_check.py",
    "core.trusted_cases": "test_trusted_check.py",
    "gates.chip_compile": "test_rehearsal.py",
}


def _has_logic(path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, (ast.FunctionDef, ast.ClassDef)) for node in tree.body)


def test_every_module_with_logic_has_a_test_module():
    tests = {p.name for p in (REPO / "tests").glob("test_*.py")}
    missing, stale = [], []
    for name, path in KNOWN.items():
        leaf = name.split(".")[-1]
        if path.name == "__init__.py":
            continue
        if f"test_{leaf}.py" in tests:
            continue
        where = TESTED_THROUGH.get(name)
        if where is None:
            if _has_logic(path) or name in FACES:
                missing.append(name)
        elif where not in tests:
            stale.append((name, where))
    assert not missing, f"no tests/test_<module>.py and no entry in TESTED_THROUGH: {missing}"
    assert not stale, f"TESTED_THROUGH names test modules that do not exist: {stale}"


# ---------------------------------------------------------------- one place per hook

def _hook_names() -> set[str]:
    """Every hook the course could implement: pytest's, the course's own, and those of the
    plugins whose hooks it answers (pytest-xdist, pytest-benchmark), where installed."""
    import _pytest.hookspec

    from pytest_tpucourse.run import hookspecs

    modules = [_pytest.hookspec, hookspecs]
    for name in ("xdist.newhooks", "pytest_benchmark.hookspec"):
        if importlib.util.find_spec(name.split(".")[0]) is not None:
            modules.append(importlib.import_module(name))
    return {name for module in modules for name in dir(module) if name.startswith("pytest_")}


def _specname(function: ast.FunctionDef) -> str:
    """The hook a function implements: its name, or the specname= of its @hookimpl."""
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call):
            for keyword in decorator.keywords:
                if keyword.arg == "specname" and isinstance(keyword.value, ast.Constant):
                    return keyword.value.value
    return function.name


def hook_implementations(package_dir=PACKAGE_DIR) -> dict[str, list[str]]:
    """{hook: [where]}: each module-level hook function ("run/reports.py") and each hook method
    of a class ("run/reports.py:ReportCounter") in the package, hook specifications aside."""
    names = _hook_names()
    found: dict[str, list[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        relative = path.relative_to(package_dir).as_posix()
        if relative == "run/hookspecs.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        holders = [(relative, tree.body)] + [(f"{relative}:{node.name}", node.body) for node in tree.body
                                             if isinstance(node, ast.ClassDef)]
        for where, body in holders:
            for node in body:
                if isinstance(node, ast.FunctionDef) and _specname(node) in names:
                    found.setdefault(_specname(node), []).append(where)
    return found


# A hook several concerns answer: each implementation in a module of its own. The end-of-run
# record (registered only with --tpucourse-results) counts each report into its file too; a
# watch run (registered only with --watch-run) puts one test first, answers it at once and
# keeps the run's outcomes and times; the isolated check (registered only with --isolated) checks
# again, outside the run's process, what the run found done, and says so in the summary; a gate
# run's progress (registered only with --gates) tallies the gate tests and says each gate's end.
SEVERAL_CONCERNS = {
    "pytest_runtest_logreport": {"run/reports.py:ReportCounter", "classroom/record.py:EndOfRunRecord",
                                 "learner/watch_run.py:WatchRun", "run/gate_progress.py:GateProgress",
                                 "run/host_cpu.py:HostCpuChild"},
    "pytest_collection_finish": {"run/collection.py", "run/gate_progress.py:GateProgress"},
    "pytest_collection_modifyitems": {"run/collection.py", "learner/watch_run.py:WatchRun"},
    "pytest_xdist_node_collection_finished": {"run/collection.py", "learner/watch_run.py:WatchRun"},
    "pytest_sessionfinish": {"run/lifecycle.py", "learner/watch_run.py:WatchRun",
                             "classroom/isolated.py:IsolatedCheck", "run/host_cpu.py:HostCpuHalf"},
    # On a TPU (registered only where tests are placed off the chip, run/host_cpu.py): a test placed on
    # the host's CPU takes its child's reports, and a host-CPU child ships its own.
    "pytest_runtest_makereport": {"run/reports.py", "run/host_cpu.py:HostCpuHalf"},
    "pytest_report_teststatus": {"run/reports.py", "run/host_cpu.py:HostCpuHalf"},
    "pytest_runtest_logfinish": {"run/graded_call.py", "run/host_cpu.py:HostCpuChild",
                                 "run/gate_progress.py:GateProgress"},
    "pytest_terminal_summary": {"run/summary.py", "classroom/isolated.py:IsolatedCheck"},
}


def twice_for_one_concern(found: dict[str, list[str]]) -> dict[str, list[str]]:
    """The hooks implemented more than once where SEVERAL_CONCERNS does not say so, and those
    implemented twice in one module (a module and its classes are one concern)."""
    wrong = {}
    for hook, where in found.items():
        modules = [w.split(":")[0] for w in where]
        if len(set(modules)) < len(modules) or (len(where) > 1 and set(where) != SEVERAL_CONCERNS.get(hook)):
            wrong[hook] = where
    return wrong


def test_no_hook_is_implemented_twice_for_one_concern():
    found = hook_implementations()
    assert "pytest_runtest_call" in found and "pytest_runtest_logreport" in found
    assert twice_for_one_concern(found) == {}


def test_the_hook_rule_fails_on_a_hook_twice():
    found = {hook: list(where) for hook, where in hook_implementations().items()}
    found["pytest_runtest_call"].append("run/session.py:CourseSession")  # the graded call in two places
    found["pytest_sessionstart"].append("run/lifecycle.py:Starter")  # one module answering it twice
    assert set(twice_for_one_concern(found)) == {"pytest_runtest_call", "pytest_sessionstart"}


def test_the_hook_modules_are_the_plugins_pytest_loads():
    """Every module with hooks is the entry point or one it names in pytest_plugins (fixtures.py
    has fixtures alone); those are
    imported by pytest alone (an earlier import would escape its assertion rewriting, with a
    warning), the entry point reaching one only inside a hook, after pytest loaded it."""
    plugin = importlib.import_module("pytest_tpucourse.plugin")
    loaded = {name.removeprefix("pytest_tpucourse.") for name in plugin.pytest_plugins}
    with_hooks = {where.split(":")[0] for where_all in hook_implementations().values() for where in where_all
                  if ":" not in where}
    assert with_hooks <= {f"{name.replace('.', '/')}.py" for name in loaded | {"plugin"}}
    assert len(with_hooks) >= 6
    importers = sorted((module, target) for graph in (EAGER, LAZY) for module, targets in graph.items()
                       for target in targets if target in loaded)
    assert importers == sorted(("plugin", target) for target in LAZY.get("plugin", ()) if target in loaded)
    assert not loaded & EAGER.get("plugin", set())


def test_the_session_holds_state_and_is_no_plugin(pytestconfig):
    from pytest_tpucourse.run.session import SESSION, CourseSession

    assert [name for name in dir(CourseSession) if name.startswith("pytest_")] == []
    session = pytestconfig.stash.get(SESSION, None)
    if session is None:
        pytest.skip("this run is no course run (the plugin is off)")
    assert not pytestconfig.pluginmanager.is_registered(session)
