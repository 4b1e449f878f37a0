"""`tpucourse site`: built on a fresh clone, every page rendered in Chromium with no page error, the
instruments driven (the roofline playground follows its shape field, the timeline steps into the
deadlock), and `--serve` answering on 127.0.0.1.

Chromium comes from the system (Debian's `chromium` package; .ci/run installs it) and Playwright's
Python package drives it, as for the x-ray page (test_xray_page.py); where either is missing the
browser tests skip, saying which.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from pytest_tpucourse import chips
from pytest_tpucourse.core.course import load_course
from pytest_tpucourse.gates import criteria
from pytest_tpucourse.learner import self_test, state
from pytest_tpucourse.site import instruments, markdown, server

from .support import REPO, compiler_retiles_int8, mark_done_as_a_run_would

pytestmark = pytest.mark.runs  # the site is built by the course's command line in a child process

COURSE = load_course(REPO)
PAGES = ["index", "bench", "xray", "ex01", "ex03", "ex05", "ex09", "ex10", "ex11"] + [c.id for c in COURSE.chapters]
BUILD_TIMEOUT = 600


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A fresh clone of this checkout: no state file, no records of the learner's."""
    where = tmp_path_factory.mktemp("clone") / "course"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(where)], check=True, timeout=120)
    return where


@pytest.fixture(scope="module")
def site(clone):
    """The site built there by the command (-P: this installation's package, not the clone's copy)."""
    out = clone / "site-out"
    done = subprocess.run([sys.executable, "-P", "-m", "pytest_tpucourse.commands.main", "site", "--out", str(out)], cwd=clone,
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"to {out}" in done.stdout
    return out


def test_the_build_writes_every_page_and_fetches_nothing(site):
    for name in PAGES:
        text = (site / f"{name}.html").read_text(encoding="utf-8")
        assert not re.search(r'<(script|link|img|iframe)[^>]+(src|href)="(https?:)?//', text), name
        # every page states the honesty rule (the x-ray is shown inside EX·05's page, which does)
        assert name == "xray" or "<b>the honesty rule</b>" in text, name
    scripts = "".join((site / "static" / f).read_text(encoding="utf-8") for f in os.listdir(site / "static"))
    assert not re.search(r"url\((?!#)|@import|fetch\((?![`\"]api/)", scripts)  # only the local server's api/
    home = (site / "index.html").read_text(encoding="utf-8")
    assert f"0/{len(criteria.GATES)}</b> gates passed" in home and f"0/{len(COURSE.chapters)}</b> chapters" in home
    assert "roofline-predicted floors · v5e · hardware rows replace these" in home
    from pytest_tpucourse.gates import records as rec
    from pytest_tpucourse.site.build import home_floors

    floors = home_floors(rec.read(REPO / rec.PUBLISHED_PATH).records)  # the course's three v5e floors
    assert len(floors) == 3
    for floor in floors:  # predicted (697.7, 41.1, 122.8 µs), or the measured v5e row that replaced one
        assert f"<b>{floor['value']}</b>" in home and floor["what"] in home
        assert floor["what"].startswith(("roofline-predicted · v5e", "measured · v5e"))
    assert "ch01.softmax" in home  # next, on a fresh clone: the course's first exercise
    capstone = (site / "ch15.html").read_text(encoding="utf-8")
    assert "The upstream submission exists in public" in capstone and "awaiting hardware" in capstone
    assert capstone.count('class="tick"') == 7


def test_the_home_page_counts_what_the_state_file_says(clone, tmp_path):
    """A chapter whose every exercise the state file shows done counts, as in `tpucourse progress`; each
    done exercise says whether the trusted check confirmed it or it is the learner's own run only."""
    from pytest_tpucourse.core.course import load_course
    from pytest_tpucourse.site import pages
    from pytest_tpucourse.site.learner_view import course_view, status_counts

    course = load_course(clone)
    chapter = course.chapter("ch10")
    mark_done_as_a_run_would(clone, chapter.exercises)
    try:
        view = course_view(course)
        assert view.chapters_complete == 1 and view.chapter("ch10").complete
        assert view.next_exercise.key == "ch01.softmax"
        assert view.chapter("ch10").gate_label == criteria.AWAITING
        html = pages.chapter(view.chapter("ch10"), "# ch10", [])  # done by the learner's own runs only
        assert "your run only · tpucourse confirm ch10 checks it outside your run" in html
        first = chapter.exercises[0]
        state.record_confirmations(clone, {first.key: {"verdict": "agrees", "cases": 3, "reason": ""}},
                                   {first.key: state.file_digest(clone / first.module_path)}, "a test")
        view = course_view(course)
        html = pages.chapter(view.chapter("ch10"), "# ch10", [])
        assert 'class="confirmation c-confirmed">confirmed by the trusted check</span>' in html
        assert status_counts(view.chapter("ch10")) == f"{len(chapter.exercises)}/{len(chapter.exercises)} exercises, 1 confirmed"
    finally:
        (clone / state.STATE_DIR / state.STATE_FILE).unlink()


def test_every_status_the_state_can_give_has_a_badge(clone):
    """An exercise "not counted" (a hand-edited entry, changed test files) is shown as such, not a crash."""
    from pytest_tpucourse.core.course import load_course
    from pytest_tpucourse.learner.status import Status
    from pytest_tpucourse.site import pages
    from pytest_tpucourse.site.learner_view import course_view

    assert set(pages.STATUS_WORDS) == {status.value for status in Status}
    course = load_course(clone)
    softmax = course.chapter("ch01").exercises[0]
    state.update(clone, lambda d: d["exercises"].update({softmax.key: {"status": "done"}}))
    try:
        view = course_view(course)
        assert view.chapter("ch01").exercises[0].status == Status.NOT_COUNTED
        html = pages.chapter(view.chapter("ch01"), "# ch01", [])
        assert 'class="badge s-not-counted">not counted</span>' in html
    finally:
        (clone / state.STATE_DIR / state.STATE_FILE).unlink()


def test_markdown_renders_what_the_readmes_use():
    html = markdown.render("# Title\n\nSome `a < b` and **bold** in block_q.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
                           "- item one\n  continued\n\n  ```python\n  x = 1\n  ```\n- item two\n\n```text\n<raw>\n```\n")
    assert '<h1 id="title">Title</h1>' in html
    assert "<code>a &lt; b</code>" in html and "<strong>bold</strong>" in html and "block_q" in html
    assert "<th>a</th>" in html and "<td>2</td>" in html
    assert html.count("<li>") == 2 and "item one continued" in html and 'data-lang="python"' in html
    assert "&lt;raw&gt;" in html and "<raw>" not in html


# ---------------------------------------------------------------- in Chromium


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    opened = context.new_page()
    opened.errors = []
    opened.on("pageerror", lambda error: opened.errors.append(str(error)))
    opened.on("console", lambda m: opened.errors.append(f"console: {m.text}") if m.type == "error" else None)
    yield opened
    context.close()


@pytest.mark.parametrize("name", PAGES)
def test_every_page_renders_with_no_page_error(site, page, name):
    page.goto((site / f"{name}.html").as_uri())
    page.wait_for_load_state("load")
    assert page.locator("h1").first.is_visible()
    assert page.errors == []


def test_the_jump_box_opens_with_ctrl_k_and_goes_to_an_instrument(site, page):
    page.goto((site / "index.html").as_uri())
    page.keyboard.press("Control+k")
    page.locator("#jump-input").fill("semaphore")
    assert "EX·10" in page.locator("#jump-list li").first.inner_text()
    page.keyboard.press("Enter")
    page.wait_for_url("**/ex10.html")
    assert page.errors == []


def test_the_roofline_playground_follows_its_shape_field(site, page):
    page.goto((site / "ex01.html").as_uri())
    for shape, expected in (("4096x4096x4096", "697.7 µs"), ("8x4096x4096", "41.1 µs"), ("4096x4096", "122.8 µs")):
        before = page.locator("#you circle").get_attribute("cx") if page.locator("#you").count() else None
        page.locator("#shape").fill(shape)
        assert page.locator("#floor").inner_text().startswith(expected)
        assert page.locator("#you circle").get_attribute("cx") != before  # the point moved
    page.locator("#shape").fill("8xbanana")
    assert page.locator("#floor").inner_text() == "—"
    assert "not of the form" in page.locator("#detail").inner_text()
    assert page.errors == []


ROOFLINE_CASES = [(chip, op, shape, dtype) for chip in chips.KNOWN_CHIPS
                  for op, shape in (("matmul", "4096x4096x4096"), ("matmul", "8x4096x4096"), ("matmul", "1x1x1"),
                                    ("matmul", "512x3x70000"), ("add", "4096x4096"), ("add", "7x13"))
                  for dtype in instruments.ROOFLINE_DTYPES]


def test_the_playground_and_roofline_py_agree_on_a_table_of_cases(site, page):
    """The page computes floors in JavaScript: they must be roofline.py's, refusals included."""
    page.goto((site / "ex01.html").as_uri())
    answers = page.evaluate("""cases => cases.map(([chip, op, shape, dtype]) => {
        try { return TpuRoofline.floor(chip, op, shape, dtype); } catch (err) { return {error: err.message}; } })""",
                            ROOFLINE_CASES)
    refused = 0
    for case, got in zip(ROOFLINE_CASES, answers):
        try:
            want = instruments.predict(*case)
        except ValueError as error:
            assert "error" in got and str(error).split(":")[0] in got["error"], (case, got, error)
            refused += 1
            continue
        assert "error" not in got, (case, got)
        for key in ("flops", "bytes", "floor_seconds", "intensity", "ridge"):
            assert math.isclose(got[key], want[key], rel_tol=1e-12), (case, key, got[key], want[key])
        assert got["bound"] == want["bound"], case
    assert 0 < refused < len(ROOFLINE_CASES)  # float32 has no published TPU peak: both refuse it


def test_the_timeline_steps_into_the_deadlock(site, page):
    page.goto((site / "ex10.html").as_uri())
    page.locator("#tl-schedule").select_option("next-step-semaphore")
    page.locator("#tl-devices").select_option("4")
    expected = instruments.timeline_data()["schedules"]["next-step-semaphore"]["runs"]["4"]
    steps = 0
    while "DEADLOCK" not in page.locator("#tl-summary").inner_text():
        assert page.locator("td.stuck").count() == 0, "the deadlock is marked before the round it happens in"
        page.locator("#tl-step").click()
        steps += 1
        assert steps < 50
    assert steps == max(r[-1] for r in expected["rounds"] if r) + 1
    assert page.locator("#tl-summary").inner_text() == expected["summary"]
    stuck = page.locator("td.stuck").all_inner_texts()
    assert len(stuck) == 4 and all(text.startswith("✗ dma wait recv[") for text in stuck)
    assert page.errors == []


def test_the_streaming_attention_scrubs_to_the_exact_softmax(site, page):
    page.goto((site / "ex03.html").as_uri())
    page.locator("#step").fill("3")
    assert "step 4 of 4" in page.locator("#step-label").inner_text()
    assert "equals the full softmax" in page.locator("#state").inner_text()
    assert page.locator("#scores rect.live").count() == 16 and page.locator("#scores rect.cell").count() == 64
    page.locator("#variant").select_option("causal")  # chapter 13: q block 1 never meets kv blocks 2 and 3
    page.locator("#step").fill("2")
    assert "never fetched" in page.locator("#step-label").inner_text()
    assert page.locator("#scores rect.live").count() == 0 and page.locator("#scores rect.masked").count() == 64 - 26
    page.locator("#step").fill("3")
    assert "equals the full softmax(Q·Kᵀ)·V (causal)" in page.locator("#state").inner_text()
    assert page.errors == []


def test_the_blockspec_sandbox_gives_the_lowerings_verdict(site, page):
    page.goto((site / "ex09.html").as_uri())
    page.locator("#bs-shape").fill("1024x1024")
    page.locator("#bs-block").fill("100x128")
    assert page.locator("#bs-verdict").inner_text().startswith("illegal: dimension -2 of the block is 100")
    assert "lowering's rules only" in page.locator("#bs-what").inner_text()
    page.locator("#bs-block").fill("8x100")
    assert page.locator("#bs-verdict").inner_text() == "not precomputed in this static build"
    assert page.errors == []


def test_the_mesh_draws_a_topology_hop_by_hop(site, page):
    page.goto((site / "ex11.html").as_uri())
    page.locator("#topology").fill("4x4")
    assert page.locator("#mesh .chip").count() == 16
    assert page.locator("#mesh .send").count() == 6  # a 4-ring both ways: 6 sends in the first step
    assert "predicted" in page.locator("#mesh-total").inner_text()
    page.locator("#topology").fill("3x5")
    assert "not precomputed" in page.locator("#mesh-what").inner_text()
    assert page.errors == []


def test_the_home_page_opens_with_streaming_attention_live(site, page):
    """As the course's home page does: EX·03 at work above the stack, not only a card below it."""
    page.goto((site / "index.html").as_uri())
    sections = page.evaluate("[...document.querySelectorAll('main > section')].map(s => s.id || s.className)")
    assert sections.index("live-ex03") < sections.index("stack"), sections
    assert page.locator("#live-ex03 .kicker").first.inner_text().startswith("EX·03 STREAMING ATTENTION")
    page.locator("#live-ex03 #step").fill("3")
    assert "equals the full softmax" in page.locator("#live-ex03 #state").inner_text()
    assert page.locator(".instrument[href='ex03.html']").count() == 1  # and its card in the workshop
    assert page.errors == []


def test_the_xray_shows_every_ops_name(site, page):
    """EX·05's columns are narrow: a line may be cut, but around its op's name, never through it."""
    page.goto((site / "ex05.html").as_uri())
    ops = page.frame_locator("#xray").locator("#jaxpr .op, #stablehlo .op[data-name^='stablehlo.']").evaluate_all(
        """els => els.map(e => {
            const name = e.querySelector('.name');
            if (!name) return [e.dataset.name, e.textContent, false];
            const line = e.getBoundingClientRect(), shown = name.getBoundingClientRect();
            return [e.dataset.name, name.textContent,
                    shown.left >= line.left && shown.right <= line.right + 0.5 && name.scrollWidth <= name.clientWidth];
        })""")
    assert len(ops) > 20
    hidden = [(ident, text) for ident, text, whole in ops if not whole or text != ident]
    assert hidden == [], f"op names cut or missing: {hidden[:5]}"
    assert page.errors == []


def test_the_blockspec_grid_is_drawn_past_400_blocks(site, page):
    page.goto((site / "ex09.html").as_uri())
    page.locator("#bs-shape").fill("1000x384")
    page.locator("#bs-block").fill("128x128")
    assert page.locator("#bs-grid line.bs-edge").count() == (8 - 1) + (3 - 1)  # every block edge
    assert "too many" not in page.locator("#bs-grid-note").inner_text()
    page.locator("#bs-shape").fill("1024x1024")
    page.locator("#bs-block").fill("8x128")  # 128 x 8 = 1,024 blocks
    assert page.locator("#bs-grid line.bs-edge").count() > 50
    note = page.locator("#bs-grid-note").inner_text()
    assert "128 × 8 grid of blocks" in note and "1,024 blocks are too many to draw each at this size: a line every 2 block rows" in note
    assert page.errors == []


def test_the_static_timeline_says_plainly_it_cannot_run_your_simulate(site, page):
    """The static build answers the box in words; it asks no server (no CORS error in the console)."""
    page.goto((site / "ex10.html").as_uri())
    page.locator("#tl-mine").click()
    page.locator("#tl-mine-status").wait_for(state="visible", timeout=5_000)
    said = page.locator("#tl-mine-status").inner_text()
    assert said.startswith("This static page cannot run your code: tpucourse site --serve")
    assert "the course's run (timeline.py's), not yours" in said
    assert not page.locator("#tl-mine").is_checked()
    assert page.errors == []


def _labels_outside_their_boxes(page) -> list:
    """The chips whose label is not inside their box with 2 pixels to spare across (the box's stroke
    and a gap: a label touching the stroke reads as spilling over it) and 1 up and down."""
    return page.locator("#mesh .chip").evaluate_all("""gs => gs.filter(g => g.querySelector('text')).map(g => {
        const box = g.querySelector('rect').getBBox(), text = g.querySelector('text').getBBox();
        return [g.querySelector('text').textContent, text.width.toFixed(1), box.width.toFixed(1),
                text.x >= box.x + 2 && text.x + text.width <= box.x + box.width - 2 &&
                text.y >= box.y + 1 && text.y + text.height <= box.y + box.height - 1];
    }).filter(([, , , inside]) => !inside)""")


def test_the_mesh_words_follow_the_topology_and_its_labels_fit(site, page):
    page.goto((site / "ex11.html").as_uri())
    page.locator("#topology").fill("4x4")
    what = page.locator("#mesh-what").inner_text()
    assert "4x4 slice: a 2D mesh, not a torus, every axis a line (no wraparound link)" in what
    assert "2D torus" not in what and "line (no wraparound link)" in page.locator("#mesh-phases").inner_text()
    assert _labels_outside_their_boxes(page) == [] and page.locator("#mesh .chip text").count() == 16
    page.locator("#topology").fill("16x16")
    assert "16x16 slice: a 2D torus, every axis a ring (wraparound link)" in page.locator("#mesh-what").inner_text()
    assert _labels_outside_their_boxes(page) == []
    assert page.errors == []


# ---------------------------------------------------------------- --serve


@pytest.fixture
def served(site, clone):
    httpd = server.make_server(site, clone, 0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://{httpd.server_address[0]}:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _answer(url: str) -> tuple[int, bytes]:
    """A slow answer (202 while it is worked out), asked again as the page does, at most 2 minutes."""
    for _ in range(240):
        status, body = _get(url)
        if status != 202:
            return status, body
        time.sleep(0.5)
    pytest.fail(f"{url} still working after 2 minutes")


def test_serve_answers_on_localhost_only(served, clone):
    assert served.startswith("http://127.0.0.1:")
    status, body = _get(f"{served}/index.html")
    assert status == 200 and b"Learn to make TPUs fast." in body
    status, body = _get(f"{served}/api/roofline?chip=v5e&op=matmul&shape=8x4096x4096")
    assert status == 200 and json.loads(body)["floor_seconds"] == instruments.predict("v5e", "matmul", "8x4096x4096")["floor_seconds"]
    status, body = _get(f"{served}/api/mesh?chip=v5e&topology=3x5&op=all-reduce&bytes=1GiB")
    assert status == 200 and json.loads(body)["topology"] == [3, 5]
    status, body = _get(f"{served}/api/roofline?chip=v5e&op=matmul&shape=banana")
    assert status == 400 and "not of the form" in json.loads(body)["error"]
    status, body = _answer(f"{served}/api/timeline?schedule=exchange-deadlock&devices=4")
    assert status == 200 and "not written yet" in json.loads(body)["error"]  # a fresh clone's stub


def test_serve_records_a_tick_as_tpucourse_tick_does(served, clone):
    request = urllib.request.Request(f"{served}/api/tick", data=json.dumps({"chapter": "ch15", "item": 3}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        assert "self-reported" in json.loads(response.read())["printed"]
    try:
        assert self_test.ticked(state.read(clone), "ch15") == {3}
    finally:
        (clone / state.STATE_DIR / state.STATE_FILE).unlink()


def _post(url: str, body: bytes, headers: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_serve_answers_the_sites_own_pages_only(served, clone):
    """Another web page (its Origin, or a name of its own that resolves here) may not tick items or
    run the learner's code; a body that is not a JSON object is a 400 with a reason, not a dropped line."""
    tick = json.dumps({"chapter": "ch15", "item": 3}).encode()
    as_json = {"Content-Type": "application/json"}
    assert _post(f"{served}/api/tick", tick, {**as_json, "Origin": "https://example.com"})[0] == 403
    assert _post(f"{served}/api/tick", tick, {"Content-Type": "text/plain"})[0] == 415
    assert _post(f"{served}/api/tick", b"[1, 2]", as_json) == (400, {"error": ANY_JSON_OBJECT_ERROR})
    request = urllib.request.Request(f"{served}/api/timeline?schedule=exchange-deadlock&devices=4",
                                     headers={"Host": "attacker.example"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 403
    assert not (clone / state.STATE_DIR / state.STATE_FILE).exists()


ANY_JSON_OBJECT_ERROR = 'POST /api/tick takes a JSON object: {"chapter": ..., "item": ...}'


def test_the_site_command_serves_on_127_0_0_1(clone, tmp_path):
    """`tpucourse site --serve --port 0`, the real command, answers within a bounded time, then stops."""
    out = tmp_path / "served-site"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen([sys.executable, "-P", "-m", "pytest_tpucourse.commands.main", "site", "--serve", "--port", "0",
                              "--out", str(out)], cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
    try:
        line = ""
        timer = threading.Timer(BUILD_TIMEOUT, child.kill)
        timer.start()
        for line in child.stdout:
            if line.startswith("serving the course site on "):
                break
        timer.cancel()
        assert line.startswith("serving the course site on http://127.0.0.1:"), child.stderr.read()[-2000:]
        url = line.split(" on ", 1)[1].split()[0]
        status, body = _get(f"{url}api/ping")
        assert status == 200 and json.loads(body) == {"serve": True}
    finally:
        child.terminate()
        child.wait(timeout=30)


def test_served_sandbox_headline_and_note_follow_the_real_compiler(served, page):
    """Under --serve the sandbox asks the real compiler (libtpu), which the static build cannot; the
    headline is its refusal where it refuses, and the int8 note says what the installed one did."""
    from pytest_tpucourse.compiler import libtpu as tpu_compile

    if not tpu_compile.available():
        pytest.skip("no libtpu: pip install -e '.[tpu-compile]' (the test extra installs it)")
    page.goto(f"{served}/ex09.html")
    page.locator("#bs-shape").fill("1024x1024")
    page.locator("#bs-dtype").select_option("int8")
    page.locator("#bs-block").fill("8x128")
    page.wait_for_function("(t => t.includes('int8, block 8x128') && t.includes('compiler v5e:'))"
                           "(document.getElementById('bs-lines').textContent)", timeout=300_000)
    lines = page.locator("#bs-lines").inner_text()
    headline, verdict_class = page.locator("#bs-verdict").inner_text(), page.locator("#bs-verdict").get_attribute("class")
    # libtpu 0.0.42 refuses the int8 block at its tiling (E2002); 0.0.50 re-tiles it and compiles it
    if compiler_retiles_int8():
        assert "compiler v5e: compiles" in lines and "the installed one compiles it" in lines
        assert headline.startswith("legal: the TPU lowering accepts it and the compiler compiles it")
        assert verdict_class.split() == ["big", "legal"]
    else:
        assert "compiler v5e: E2002" in lines and "the installed one refuses it" in lines
        assert headline.startswith("refused by the compiler v5e: E2002") and "the TPU lowering accepts it" in headline
        assert verdict_class.split() == ["big", "illegal"]
    assert "real compiler" in page.locator("#bs-what").inner_text()
    assert page.errors == []


def test_served_sandbox_shows_it_is_compiling_not_the_previous_answer(served, page, monkeypatch):
    """A compile of many MiB takes the compiler 20-50 s: meanwhile the page says it is compiling,
    and the previous block's verdict is gone (a stand-in compile here, held until released)."""
    release = threading.Event()
    lowering_only = instruments.blockspec

    def blockspec(shape, block, dtype, *, compiler):
        if shape == "8192x8192":
            release.wait(60)
            return {**lowering_only("1024x1024", "128x128", dtype, compiler=False), "headline": "compiled at last"}
        return lowering_only(shape, block, dtype, compiler=False)

    monkeypatch.setattr(instruments, "blockspec", blockspec)
    page.goto(f"{served}/ex09.html")
    page.wait_for_function("document.getElementById('bs-lines').textContent.includes('1000x384')", timeout=60_000)
    try:
        page.locator("#bs-shape").fill("8192x8192")
        page.locator("#bs-block").fill("8192x8192")
        page.wait_for_function("document.getElementById('bs-verdict').textContent.startsWith('compiling: the real "
                               "compiler is asked about block 8192x8192')", timeout=20_000)
        assert page.locator("#bs-verdict").get_attribute("class").split() == ["big", "working"]
        assert page.locator("#bs-lines").inner_text() == "" and page.locator("#bs-grid svg").count() == 0
    finally:
        release.set()
    page.wait_for_function("document.getElementById('bs-verdict').textContent === 'compiled at last'", timeout=20_000)
    assert page.errors == []


def test_served_timeline_says_plainly_that_your_simulate_is_not_written_yet(served, page):
    """A fresh clone's stub: the box does not stay ticked over the course's run; the page says why."""
    page.goto(f"{served}/ex10.html")
    page.locator("#tl-mine").click()
    page.wait_for_function("document.getElementById('tl-mine-status').textContent.includes('not written yet')",
                           timeout=120_000)
    said = page.locator("#tl-mine-status").inner_text()
    assert said.startswith("Your simulate() is not written yet") and "the course's run (timeline.py's), not yours" in said
    assert not page.locator("#tl-mine").is_checked()
    assert "the course's semaphore model" in page.locator("#tl-what").inner_text()
    assert page.errors == []


def test_served_mesh_draws_8x8_with_its_labels_inside_and_refuses_what_it_cannot_draw(served, page):
    page.goto(f"{served}/ex11.html")
    assert page.evaluate("Site.served") is True
    page.locator("#topology").fill("8x8")
    page.wait_for_function("document.querySelectorAll('#mesh .chip').length === 64", timeout=60_000)
    assert _labels_outside_their_boxes(page) == []
    assert page.locator("#mesh .chip text").count() == 64
    assert "8x8 slice: a 2D mesh, not a torus, every axis a line (no wraparound link)" in page.locator("#mesh-what").inner_text()
    page.locator("#topology").fill("100000x100000")
    page.wait_for_function("document.getElementById('mesh-what').textContent.includes('past what the page can draw')",
                           timeout=20_000)
    assert [e for e in page.errors if "status of 400 (Bad Request)" not in e] == []  # Chromium logs the refusal


def test_serve_plays_a_schedule_with_the_learners_own_simulate(served, clone):
    """With a simulate() written (here the shipped solution's), the timeline answers from it, and agrees."""
    mine = clone / "exercises" / "ch14" / "timeline.py"
    stub = mine.read_text(encoding="utf-8")
    mine.write_text((clone / "solutions" / "ch14" / "timeline.py").read_text(encoding="utf-8"), encoding="utf-8")
    try:
        status, body = _answer(f"{served}/api/timeline?schedule=next-step-semaphore&devices=4")
    finally:
        mine.write_text(stub, encoding="utf-8")
    answer = json.loads(body)
    assert status == 200 and "error" not in answer, answer
    assert answer["what"].startswith("simulated by your simulate()")
    shipped = instruments.timeline_data()["schedules"]["next-step-semaphore"]["runs"]["4"]
    assert {k: answer[k] for k in shipped} == shipped
