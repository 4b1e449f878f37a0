"""A pytest plugin for mutant runs: once a test file has failed, its other tests are skipped.

A mutant run asks which graded files fail, not how often. The first failure settles a
file's verdict; the files that must pass still run every test. Loaded with
`-p tests.first_failure_per_file` (the repository root on PYTHONPATH).
"""

from pathlib import Path

import pytest

_FAILED: set[Path] = set()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if Path(item.path) in _FAILED:
        pytest.skip("an earlier test of this file failed: the file's verdict is settled")


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> None:
    if call.excinfo is not None and call.when == "call" and not call.excinfo.errisinstance(
            pytest.skip.Exception):
        _FAILED.add(Path(item.path))
