"""The x-ray page in a real browser: hovering one op highlights its counterparts, only them.

Chromium comes from the system (Debian's `chromium` package; .ci/run installs it) and
Playwright's Python package drives it; Playwright's own browser downloads are not used.
Where either is missing the tests skip, saying which.
"""

import os
import shutil

import pytest

from pytest_tpucourse.commands import main

from .support import REPO

PROGRAM = REPO / "tests" / "fixtures" / "xray_program.py"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _chromium() -> str:
    found = os.environ.get("TPUCOURSE_CHROMIUM") or next(filter(None, map(shutil.which, BROWSERS)), None)
    if found is None:
        pytest.skip("no browser: the x-ray page is tested in Chromium (apt-get install chromium)")
    return found


@pytest.fixture(scope="module")
def browser_page(tmp_path_factory):
    executable = _chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("no playwright: pip install -e '.[test]' installs the version the project pins")
    out = tmp_path_factory.mktemp("xray") / "xray.html"
    assert main.main(["xray", f"{PROGRAM}:layer", "--shapes", "8x64", "64x32", "32", "--html", str(out)]) == 0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(out.as_uri())
        yield page
        browser.close()


def _op(page, column: str, name: str):
    return page.locator(f"#{column} .op[data-name='{name}']").first


def _highlighted(page) -> dict[str, list[str]]:
    return {column: page.locator(f"#{column} .op.hl").evaluate_all("els => els.map(e => e.dataset.name)")
            for column in ("jaxpr", "stablehlo", "hlo")}


def test_hovering_the_dot_lights_its_counterparts_only(browser_page):
    page = browser_page
    _op(page, "jaxpr", "dot_general").hover()
    lit = _highlighted(page)
    assert lit["jaxpr"] == ["dot_general"]
    assert lit["stablehlo"] == ["stablehlo.dot_general"]
    assert len(lit["hlo"]) == 1 and "fusion" in lit["hlo"][0]
    assert "tanh" not in lit["jaxpr"] and "stablehlo.tanh" not in lit["stablehlo"]


def test_hovering_a_kernel_lights_every_op_it_runs(browser_page):
    page = browser_page
    tanh_kernels = _highlighted_after(page, "jaxpr", "tanh")["hlo"]
    assert tanh_kernels, "tanh maps to no kernel on the page"
    lit = _highlighted_after(page, "hlo", tanh_kernels[0])
    assert "tanh" in lit["jaxpr"] and "stablehlo.tanh" in lit["stablehlo"]
    assert "dot_general" not in lit["jaxpr"]


def test_leaving_an_op_clears_the_highlight(browser_page):
    page = browser_page
    _op(page, "jaxpr", "tanh").hover()
    page.mouse.move(0, 0)
    assert _highlighted(page) == {"jaxpr": [], "stablehlo": [], "hlo": []}
    assert page.locator(".op.self").count() == 0


def _highlighted_after(page, column, name):
    page.mouse.move(0, 0)
    _op(page, column, name).hover()
    return _highlighted(page)
