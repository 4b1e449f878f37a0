"""`tpucourse site --serve`: the built site on 127.0.0.1, and the instruments answered live.

The standard library's http.server, bound to 127.0.0.1 only. Besides the site's files it
answers, as JSON, the same functions the static build precomputes (instruments.py) for any
input: GET /api/roofline, /api/blockspec (with the real compiler's verdict: the tpu-compile
extra), /api/timeline (a shipped schedule played by the learner's own simulate()), /api/mesh;
and POST /api/tick, which records a self-test tick as `tpucourse tick` does (the learner's word,
never checked).

Every request is bounded. Each connection has a thread of its own (at most MAX_CONNECTIONS at
once; one more is answered 503), a socket timeout and a deadline for sending its request, so a
client that sends nothing, or sends slowly, holds only its own connection. A body is read only
when it says its length, at most MAX_BODY_BYTES. Slow answers (a compile by the real compiler,
the learner's simulate()) are worked off the request path, one at a time per kind
(slow_work.py): a request waits ANSWER_WAIT seconds, then gets 202 and what is being done, and
the page asks again. Sizes past what a page can draw are refused before any work
(instruments.py). A body that is not the JSON object a tick takes is a 400 with the reason.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import traceback
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from ..learner import self_test
from ..learner.requests import RequestError, course_here
from . import instruments
from .slow_work import Busy, Lane, Working

HOST = "127.0.0.1"
CONNECTION_TIMEOUT = 10.0  # seconds a connection may stay silent while it sends its request
REQUEST_DEADLINE = 30.0  # seconds to send the whole request (line, headers, body), however slowly
MAX_CONNECTIONS = 32  # connections served at once; the site's pages open a few
MAX_BODY_BYTES = 4096  # a tick is a few dozen bytes
ANSWER_WAIT = 1.0  # seconds a request waits for slow work before it is told "still working"


def _one(query: dict, name: str, default: str | None = None) -> str:
    values = query.get(name)
    if not values:
        if default is None:
            raise ValueError(f"missing ?{name}=")
        return default
    return values[0]


def answer(server: CourseServer, path: str, query: dict) -> dict | Working:
    """The JSON answer of one GET /api/... request, or Working while a slow one is worked out."""
    if path == "/api/ping":
        return {"serve": True}
    if path == "/api/roofline":
        return instruments.predict(_one(query, "chip"), _one(query, "op"), _one(query, "shape"),
                                   _one(query, "dtype", "bfloat16"))
    if path == "/api/blockspec":
        shape, block, dtype = _one(query, "shape"), _one(query, "block"), _one(query, "dtype")
        return server.compiler.ask(("blockspec", shape, block, dtype),
                                   lambda: instruments.blockspec(shape, block, dtype, compiler=True),
                                   server.answer_wait)
    if path == "/api/timeline":
        name = _one(query, "schedule")
        devices = instruments.timeline_devices(_one(query, "devices"))
        mine = Path(server.course_root) / instruments.LEARNER_TIMELINE
        edited = (mine.stat().st_mtime_ns, mine.stat().st_size) if mine.is_file() else None
        return server.learner.ask(("timeline", name, devices, edited),
                                  lambda: instruments.learner_timeline(server.course_root, name, devices),
                                  server.answer_wait)
    if path == "/api/mesh":
        return instruments.mesh(_one(query, "chip"), _one(query, "topology"), _one(query, "op"),
                                _one(query, "bytes"))
    raise LookupError(path)


def working_words(path: str, query: dict, working: Working) -> str:
    """What the page shows while a slow answer is worked out."""
    waited = f"{working.seconds:.0f} s so far" + (f", {working.ahead} question(s) before it" if working.ahead else "")
    if path == "/api/blockspec":
        return (f"compiling: the real compiler is asked about block {_one(query, 'block')} of "
                f"{_one(query, 'shape')} {_one(query, 'dtype')} ({waited}; blocks of many MiB take up to "
                f"a minute or two)")
    return f"running your simulate() (exercises/ch14/timeline.py) in a process of its own ({waited})"


def tick_request(body: dict) -> tuple[str, int, bool]:
    """A tick's fields, each of its type; ValueError names the one that is not."""
    unknown = set(body) - {"chapter", "item", "undo"}
    if unknown:
        raise ValueError(f"POST /api/tick takes chapter, item and undo; not {', '.join(sorted(unknown))}")
    chapter, item, undo = body.get("chapter"), body.get("item"), body.get("undo", False)
    if not isinstance(chapter, str):
        raise ValueError(f'"chapter" is a chapter id such as "ch15", not {json.dumps(chapter)}')
    if not isinstance(item, int) or isinstance(item, bool):
        raise ValueError(f'"item" is the number of a self-test item (1, 2, ...), not {json.dumps(item)}')
    if not isinstance(undo, bool):
        raise ValueError(f'"undo" is true or false, not {json.dumps(undo)}')
    return chapter, item, undo


def tick(course_root: Path, body: dict) -> dict:
    """POST /api/tick {"chapter": "ch15", "item": 3, "undo": false}: what `tpucourse tick` does and
    prints (learner/self_test.py's tick, for the course at course_root)."""
    chapter, item, undo = tick_request(body)
    lines = self_test.tick(course_here(course_root), chapter, item, undo=undo)
    return {"printed": "".join(f"{line}\n" for line in lines)}


class Handler(SimpleHTTPRequestHandler):
    server: CourseServer
    timeout = CONNECTION_TIMEOUT  # StreamRequestHandler sets it on the socket: every read and write

    def setup(self):
        super().setup()
        self._request_read = False
        self._deadline = threading.Timer(self.server.request_deadline, self._too_slow)
        self._deadline.daemon = True
        self._deadline.start()

    def finish(self):
        self._deadline.cancel()
        super().finish()

    def _too_slow(self) -> None:
        """The request was not sent in time (a byte now and then keeps a socket timeout from firing)."""
        if not self._request_read:
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def log_message(self, format, *args):  # one line per API call only; files are quiet
        if self.path.startswith("/api/"):
            super().log_message(format, *args)

    def _json(self, status: int, value: dict) -> None:
        data = json.dumps(value).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def _from_this_site(self) -> bool:
        """A request the site's own pages made: addressed to this machine by name (no other
        site's DNS name pointing here) and, when the browser says where it came from, from here.
        The API runs the learner's code and writes their state: no other web page may call it."""
        hosts = {HOST, "localhost"}
        if urlparse(f"//{self.headers.get('Host', '')}").hostname not in hosts:
            return False
        origin = self.headers.get("Origin")
        return origin is None or urlparse(origin).hostname in hosts

    def _api(self, call) -> None:
        """Answer with call()'s value: 200, 202 while it is worked out, or the status its error means.
        (A client that left before its answer is the server's handle_error's one line.)"""
        try:
            status, value = 200, call()
            if isinstance(value, Working):
                url = urlparse(self.path)
                status, value = 202, {"working": working_words(url.path, parse_qs(url.query), value),
                                      "seconds": value.seconds, "ahead": value.ahead}
        except LookupError:
            status, value = 404, {"error": f"no such endpoint {urlparse(self.path).path}"}
        except (ValueError, RequestError) as error:
            status, value = 400, {"error": str(error)}
        except Busy as error:
            status, value = 503, {"error": str(error)}
        except Exception as error:  # the server's own fault: said, logged, and the server goes on
            traceback.print_exc(file=sys.stderr)
            status, value = 500, {"error": f"the course's server failed on this question: "
                                           f"{type(error).__name__}: {error}"}
        self._json(status, value)

    def do_GET(self):
        self._request_read = True
        url = urlparse(self.path)
        if not url.path.startswith("/api/"):
            super().do_GET()
        elif not self._from_this_site():
            self._json(403, {"error": "the course's API answers the course site's own pages only"})
        else:
            self._api(lambda: answer(self.server, url.path, parse_qs(url.query)))

    def do_POST(self):
        url = urlparse(self.path)
        if url.path != "/api/tick":
            self._refuse(404, f"no such endpoint {url.path}")
        elif not self._from_this_site():
            self._refuse(403, "the course's API answers the course site's own pages only")
        elif self.headers.get("Content-Type", "").split(";")[0].strip() != "application/json":
            self._refuse(415, "POST /api/tick takes a JSON object (Content-Type: application/json)")
        else:
            body = self._body()
            if body is not None:
                self._request_read = True
                self._api(lambda: tick(self.server.course_root, body))

    def _refuse(self, status: int, why: str) -> None:
        """An answer before the body is read: the connection is closed after it, body unread."""
        self.close_connection = True
        self._json(status, {"error": why})

    def _body(self) -> dict | None:
        """The request's JSON object, or None once a refusal is sent."""
        length = self.headers.get("Content-Length")
        if length is None:
            self._refuse(411, "POST /api/tick needs a Content-Length")
            return None
        if not length.strip().isdigit():
            self._refuse(400, f"Content-Length {length!r} is not a number of bytes")
            return None
        if int(length) > MAX_BODY_BYTES:
            self._refuse(413, f"a tick is a small JSON object; {int(length):,} bytes is over {MAX_BODY_BYTES:,}")
            return None
        try:
            data = self.rfile.read(int(length))
        except TimeoutError:
            self._refuse(408, f"the body did not come within {self.timeout:g} s")
            return None
        if len(data) < int(length):
            self.close_connection = True
            return None  # the client went away, or missed the deadline: nobody to answer
        try:
            body = json.loads(data or b"{}")
        except (ValueError, UnicodeDecodeError) as error:
            self._refuse(400, f"not JSON: {error}")
            return None
        if not isinstance(body, dict):
            self._refuse(400, "POST /api/tick takes a JSON object: {\"chapter\": ..., \"item\": ...}")
            return None
        return body


class CourseServer(ThreadingHTTPServer):
    """A thread per connection, at most max_connections at once; the slow work's lanes."""

    daemon_threads = True
    block_on_close = False  # closing the server never waits on a client that stopped sending

    def __init__(self, address, handler, course_root: Path, *, max_connections: int = MAX_CONNECTIONS,
                 request_deadline: float = REQUEST_DEADLINE, answer_wait: float = ANSWER_WAIT):
        self.course_root = Path(course_root)
        self.request_deadline, self.answer_wait = request_deadline, answer_wait
        self._slots = threading.BoundedSemaphore(max_connections)
        self.compiler = Lane("compiler")  # the TPU lowering and the real compiler: one block at a time
        self.learner = Lane("runs of your code", waiting=2, keep_answers=False)
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self._busy(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _busy(self, request) -> None:
        data = json.dumps({"error": "the course's server has as many connections open as it serves at once; "
                                    "try again"}).encode("utf-8")
        try:
            request.settimeout(1.0)
            request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
                            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(data), data))
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request, client_address):
        """A connection the client dropped or that ran out of time is one line, not a traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            sys.stderr.write(f"{client_address[0]}: connection closed ({type(error).__name__})\n")
        else:
            super().handle_error(request, client_address)


def make_server(site: Path, course_root: Path, port: int, *, timeout: float = CONNECTION_TIMEOUT,
                **limits) -> CourseServer:
    """The server for the site folder `site`, answering for the course at course_root, on 127.0.0.1."""
    handler = type("CourseHandler", (Handler,), {"timeout": timeout})
    return CourseServer((HOST, port), partial(handler, directory=str(site)), course_root, **limits)


def serve(server: CourseServer) -> None:
    """Answer requests until Ctrl-C, then close the socket."""
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
