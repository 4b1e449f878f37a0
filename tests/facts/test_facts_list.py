"""docs/facts.md and tests/facts/ agree: every test the list names exists (a facts test, or a test of the
package that already reads the claim), and every facts test is listed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAMED = re.compile(r"`(tests/[\w/]*test_\w+\.py)::(\w+)(?:\[[^\]`]*\])?`")


def defined_tests(path: Path) -> set[str]:
    """The test functions defined at the top level of a test module."""
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def named_in_the_list() -> set[tuple[str, str]]:
    return set(NAMED.findall((REPO / "docs/facts.md").read_text()))


def test_every_test_the_list_names_exists():
    named = named_in_the_list()
    assert named, "docs/facts.md names no test"
    missing = sorted(f"{path}::{name}" for path, name in named
                     if not (REPO / path).is_file() or name not in defined_tests(REPO / path))
    assert not missing, f"docs/facts.md names tests that do not exist: {missing}"


def test_every_facts_test_is_in_the_list():
    named = named_in_the_list()
    unlisted = sorted(f"tests/facts/{path.name}::{name}"
                      for path in sorted((REPO / "tests/facts").glob("test_ch*.py")) for name in defined_tests(path)
                      if (f"tests/facts/{path.name}", name) not in named)
    assert not unlisted, f"facts tests docs/facts.md does not list beside their claim: {unlisted}"
