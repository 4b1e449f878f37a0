"""The x-ray page in a real browser: hovering one op highlights its counterparts, only them.

Chromium comes from the system (Debian's `chromium` package; .ci/run installs it) and
Playwright's Python package drives it; Playwright's own browser downloads are not used.
Where either is missing the tests skip, saying which.
"""

import pytest

from pytest_tpucourse.commands import main

from .support import REPO

PROGRAM = REPO / "tests" / "fixtures" / "xray_program.py"


def _open(tmp_path_factory, target, shapes):
    out = tmp_path_factory.mktemp("xray") / "xray.html"
    assert main.main(["xray", f"{PROGRAM}:{target}", "--shapes", *shapes, "--html", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def browser_page(browser, tmp_path_factory):
    page = browser.new_page()
    page.goto(_open(tmp_path_factory, "layer", ["8x64", "64x32", "32"]).as_uri())
    yield page
    page.close()


@pytest.fixture(scope="module")
def loss_page(browser, tmp_path_factory):
    """A loss whose log_softmax and one_hot are library jits: private functions in StableHLO."""
    page = browser.new_page(viewport={"width": 900, "height": 800})
    page.goto(_open(tmp_path_factory, "classify", ["8x10", "8:int32"]).as_uri())
    yield page
    page.close()


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


def test_a_library_jit_is_its_own_function_with_its_call(loss_page):
    page = loss_page
    heads = page.locator("#stablehlo .func").evaluate_all("els => els.map(e => e.textContent)")
    assert any("@main" in h for h in heads) and any("@_one_hot" in h and "call @_one_hot" in h for h in heads), heads
    assert page.locator("#stablehlo .op[data-name='call @_one_hot']").count() == 1
    order = page.locator("#stablehlo > div").evaluate_all(
        "els => els.map(e => e.classList.contains('func') ? 'func:' + e.dataset.name : e.dataset.name)")
    body = order[order.index("func:_one_hot") + 1:]
    body = body[:next((i for i, n in enumerate(body) if n.startswith("func:")), len(body))]
    assert "stablehlo.compare" in body, order
    unlinked = page.locator("#stablehlo .op.unlinked").evaluate_all("els => els.map(e => e.dataset.name)")
    assert "stablehlo.compare" not in unlinked and "stablehlo.iota" not in unlinked, unlinked


def test_hovering_one_hots_eq_lights_its_compare_and_kernel(loss_page):
    lit = _highlighted_after(loss_page, "jaxpr", "eq")
    assert lit["jaxpr"] == ["eq"]
    assert "stablehlo.compare" in lit["stablehlo"]
    assert lit["hlo"], "one_hot's eq lights no kernel"


def test_hovering_the_call_lights_the_functions_body(loss_page):
    lit = _highlighted_after(loss_page, "stablehlo", "call @_one_hot")
    assert {"iota", "eq", "convert_element_type"} <= set(lit["jaxpr"]), lit
    assert "log" not in lit["jaxpr"] and "stablehlo.log" not in lit["stablehlo"]


def test_a_cut_line_has_its_full_text_as_tooltip(loss_page):
    """A line is cut as a whole, or in the parts around its op's name (the name itself never)."""
    page = loss_page
    cut = page.locator(".layer .op, .layer .op > span, .layer .func").evaluate_all(
        "els => els.filter(e => e.scrollWidth > e.clientWidth)"
        ".map(e => [e.closest('.op, .func').textContent, e.closest('[title]').title, e.className])")
    assert cut, "nothing is cut in a 900-pixel window: the test shows nothing"
    assert "name" not in {kind for _, _, kind in cut}, cut
    for text, title, _ in cut:
        assert title and len(title) >= len(text.strip()) - 1, (text, title)
    full = page.locator("#hlo .op").first.get_attribute("title")
    assert "=" in full and "(" in full, f"an ENTRY instruction's tooltip should be its HLO line; got {full!r}"
