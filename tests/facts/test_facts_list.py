"""docs/facts.md and the facts tests agree: every test the list names exists, every facts test is
listed, and every README line a row cites is in that chapter's README."""

import ast
import re

import pytest

from .reading import COURSE

FACTS = COURSE / "docs" / "facts.md"
# A row names a facts test, or a test of the package that already reads the claim; a parametrized id may follow.
NODE_ID = re.compile(r"`(tests/(?:[\w/]+/)?test_\w+\.py)::(\w+)(?:\[[^\]`]*\])?`")


def _test_functions(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def _sections():
    """{chapter id: the section's text} of docs/facts.md."""
    parts = re.split(r"^## (ch\d\d)\b.*$", FACTS.read_text(encoding="utf-8"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_test_the_list_names_exists():
    named = NODE_ID.findall(FACTS.read_text(encoding="utf-8"))
    assert named, "docs/facts.md names no test"
    missing = [f"{path}::{name}" for path, name in named
               if not (COURSE / path).is_file() or name not in _test_functions(COURSE / path)]
    assert missing == [], f"docs/facts.md names tests that do not exist: {missing}"


@pytest.mark.parametrize("path", sorted((COURSE / "tests" / "facts").glob("test_ch*.py")), ids=lambda p: p.name)
def test_every_facts_test_is_listed(path):
    listed = {name for file, name in NODE_ID.findall(FACTS.read_text(encoding="utf-8"))
              if file == f"tests/facts/{path.name}"}
    unlisted = sorted(_test_functions(path) - listed)
    assert unlisted == [], f"{path.name} has tests no row of docs/facts.md names: {unlisted}"


def test_every_cited_readme_line_is_in_its_chapter():
    for chapter, text in _sections().items():
        readme = COURSE / "exercises" / chapter / "README.md"
        lines = len(readme.read_text(encoding="utf-8").splitlines())
        cited = [int(n) for first in re.findall(r"^\| ([\d,\s-]+) \|", text, flags=re.M)
                 for n in re.findall(r"\d+", first)]
        assert all(1 <= n <= lines for n in cited), f"{chapter}: README lines {cited}, the README has {lines}"
