"""`tpucourse site --serve` does bounded work per request: each probe here is answered within a
bounded memory and time, and no client holds up another.

The server runs in this process on 127.0.0.1 (port 0), serving a folder with one page; every probe
sends a few requests to it, each with a socket timeout, and the server's own limits are set small
(a connection timeout of a second, two connections at once where that is the probe) so that a
limit is reached in a second, not in the defaults' tens of seconds. The slow answer is a stand-in
for a long compile that waits on an event the test sets.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from pytest_tpucourse.instruments import ici
from pytest_tpucourse.site import instruments, server
from pytest_tpucourse.site.slow_work import Busy, Lane, Working

SOCKET_TIMEOUT = 20  # no probe waits longer than this for an answer


@pytest.fixture
def serve(tmp_path):
    """start(**limits) -> the base URL of a server for a one-page site; stopped after the test."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("<h1>the course</h1>", encoding="utf-8")
    running = []

    def start(**limits):
        httpd = server.make_server(tmp_path / "site", tmp_path, 0, **limits)
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        running.append((httpd, thread))
        return f"http://{httpd.server_address[0]}:{httpd.server_address[1]}"

    yield start
    for httpd, thread in running:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def _get(url: str, headers: dict | None = None) -> tuple[int, dict | bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=SOCKET_TIMEOUT) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def _post(url: str, body: bytes, headers: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=SOCKET_TIMEOUT) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT)


def _answer_of(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


# ---------------------------------------------------------------- sizes past what a page can draw


def test_a_mesh_past_what_the_page_draws_is_refused_before_it_is_planned(serve, monkeypatch):
    """A GET with no Origin (as a cross-site image sends) of a 100000x100000 slice: a 400 saying
    what fits, and no plan made (a plan's steps grow as the square of an axis)."""
    planned = []
    monkeypatch.setattr(ici, "plan", lambda *a, **k: planned.append(a) or [])
    url = serve()
    status, body = _get(f"{url}/api/mesh?chip=v5e&topology=100000x100000&op=all-reduce&bytes=1GiB")
    assert status == 400 and "past what the page can draw" in body["error"], body
    assert "it fits 75 chips across" in body["error"] and "100000 down" in body["error"]
    assert planned == []


@pytest.mark.parametrize("topology, fits", [("75", True), ("76", False), ("64x37", True), ("4x38", False),
                                            ("8x8x8", True), ("4x4x16", False), ("2x2x2x2", False)])
def test_the_mesh_refuses_exactly_what_its_picture_cannot_hold(topology, fits):
    axes = instruments.parse_topology(topology)
    if fits:
        instruments.mesh_fits_the_page(axes)
    else:
        with pytest.raises(ValueError, match="past what the page can draw|the page draws 3"):
            instruments.mesh_fits_the_page(axes)


def test_the_timeline_takes_as_many_devices_as_its_table_shows(serve):
    url = serve()
    status, body = _get(f"{url}/api/timeline?schedule=exchange&devices=100000")
    assert status == 400 and "1 to 16 devices" in body["error"]


# ---------------------------------------------------------------- one client cannot stall the rest


def test_a_client_that_withholds_its_body_stalls_no_one_and_gets_a_408(serve):
    url = serve(timeout=1.0)
    stalled = _connect(url)
    stalled.sendall(b"POST /api/tick HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 40\r\n\r\n{\"chap")
    status, body = _get(f"{url}/api/ping")  # answered while that body is still awaited
    assert (status, body) == (200, {"serve": True})
    answer = _answer_of(stalled)  # the server gives up on it after its second of silence
    assert answer.startswith(b"HTTP/1.0 408") and b"did not come within 1 s" in answer, answer
    stalled.close()


def test_a_client_that_sends_a_byte_now_and_then_is_cut_at_the_deadline(serve):
    """A socket timeout alone never fires on a client that sends a byte a second: the request has a deadline."""
    url = serve(timeout=5.0, request_deadline=1.0)
    slow = _connect(url)
    cut = False
    for byte in b"GET /api/ping HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 40:
        try:
            slow.sendall(bytes([byte]))
        except OSError:
            cut = True
            break
        slow.settimeout(0.25)
        try:
            if slow.recv(1) == b"":
                cut = True
                break
        except TimeoutError:
            pass
    slow.close()
    assert cut, "the server still reads a request sent a byte at a time, past its deadline"
    assert _get(f"{url}/api/ping")[0] == 200


def test_connections_past_the_limit_are_answered_busy_not_queued(serve):
    url = serve(timeout=5.0, max_connections=2)
    idle = [_connect(url), _connect(url)]  # each holds a thread, sending nothing
    try:
        status, body = _get(f"{url}/api/ping")
        assert status == 503 and "connections open" in body["error"]
    finally:
        for sock in idle:
            sock.close()
    for _ in range(50):  # the slots come back once the idle connections are closed
        if _get(f"{url}/api/ping")[0] == 200:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the server did not take connections again after the idle ones closed")


# ---------------------------------------------------------------- slow work off the request path


def test_a_long_compile_runs_off_the_request_path_and_the_page_is_told_it_is_working(serve, monkeypatch):
    release, started = threading.Event(), []

    def slow_blockspec(shape, block, dtype, *, compiler):  # a compile of many MiB, held until released
        started.append((shape, block, dtype))
        release.wait(SOCKET_TIMEOUT)
        return {"headline": f"compiled {shape} {block}", "legal": True}

    monkeypatch.setattr(instruments, "blockspec", slow_blockspec)
    url = serve(answer_wait=0.2)
    ask = f"{url}/api/blockspec?shape=8192x8192&block=8192x8192&dtype=float32"
    try:
        status, body = _get(ask)
        assert status == 202 and body["working"].startswith("compiling: the real compiler is asked about block 8192x8192")
        assert _get(f"{url}/api/ping")[0] == 200  # the server answers others meanwhile
        assert _get(f"{url}/api/roofline?chip=v5e&op=add&shape=4096x4096")[0] == 200
        assert _get(ask)[0] == 202 and started == [("8192x8192", "8192x8192", "float32")]  # the same job, asked again
        queued = [_get(f"{url}/api/blockspec?shape=1024x1024&block={n * 8}x128&dtype=float32")[0] for n in range(1, 9)]
        assert queued == [202] * 7 + [503], queued  # at most 8 questions: one compiling, seven waiting
    finally:
        release.set()
    for _ in range(100):
        status, body = _get(ask)
        if status != 202:
            break
        time.sleep(0.1)
    assert (status, body) == (200, {"headline": "compiled 8192x8192 8192x8192", "legal": True})


def test_a_lane_works_one_job_at_a_time_and_refuses_more_than_it_may_hold():
    gate = threading.Event()
    lane = Lane("test", waiting=2, kept=1)
    assert isinstance(lane.ask("a", lambda: gate.wait(SOCKET_TIMEOUT) and {"a": 1}, 0.05), Working)
    second = lane.ask("b", lambda: {"b": 2}, 0.05)
    assert isinstance(second, Working) and second.ahead == 1  # b waits for a: one worker
    with pytest.raises(Busy, match="2 questions to answer already"):
        lane.ask("c", lambda: {"c": 3}, 0.05)
    gate.set()
    assert lane.ask("a", lambda: pytest.fail("asked twice"), SOCKET_TIMEOUT) == {"a": 1}
    assert lane.ask("b", lambda: pytest.fail("asked twice"), SOCKET_TIMEOUT) == {"b": 2}
    assert lane.ask("c", lambda: {"c": 3}, SOCKET_TIMEOUT) == {"c": 3}
    assert lane.ask("a", lambda: {"a": "again"}, SOCKET_TIMEOUT) == {"a": "again"}  # kept=1: a was forgotten


def test_a_lane_for_the_learners_code_answers_once_and_raises_to_each_asker():
    lane = Lane("runs", keep_answers=False)
    runs = []
    assert lane.ask("t", lambda: runs.append(1) or {"run": len(runs)}, SOCKET_TIMEOUT) == {"run": 1}
    assert lane.ask("t", lambda: runs.append(1) or {"run": len(runs)}, SOCKET_TIMEOUT) == {"run": 2}

    def broken():
        raise ValueError("no such schedule")

    keeping = Lane("compiler")
    for _ in range(2):
        with pytest.raises(ValueError, match="no such schedule"):
            keeping.ask("x", broken, SOCKET_TIMEOUT)


# ---------------------------------------------------------------- a malformed body is a 400


AS_JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize("body, named", [
    ({"chapter": "ch15", "item": None}, '"item" is the number of a self-test item'),
    ({"chapter": "ch15", "item": "3"}, '"item"'),
    ({"chapter": "ch15", "item": True}, '"item"'),
    ({"chapter": "ch15", "item": 2.5}, '"item"'),
    ({"chapter": 15, "item": 3}, '"chapter" is a chapter id'),
    ({"item": 3}, '"chapter"'),
    ({"chapter": "ch15", "item": 3, "undo": "yes"}, '"undo" is true or false'),
    ({"chapter": "ch15", "item": 3, "when": "now"}, "not when"),
])
def test_a_tick_with_a_field_of_the_wrong_type_is_a_400_naming_it(serve, body, named):
    status, answer = _post(f"{serve()}/api/tick", json.dumps(body).encode(), AS_JSON)
    assert status == 400 and named in answer["error"], answer


def test_a_tick_body_is_read_only_when_small_and_said(serve):
    url = serve(timeout=1.0)
    big = _connect(url)  # says 10 MB, sends none of it: refused on its word, nothing read
    big.sendall(b"POST /api/tick HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: 10000000\r\n\r\n")
    answer = _answer_of(big)
    big.close()
    assert answer.startswith(b"HTTP/1.0 413") and b"over 4,096" in answer
    unsaid = _connect(url)
    unsaid.sendall(b"POST /api/tick HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\r\n")
    answer = _answer_of(unsaid)
    unsaid.close()
    assert answer.startswith(b"HTTP/1.0 411")
    assert _post(f"{url}/api/tick", b"{not json", AS_JSON)[0] == 400
