"""`tpucourse site --serve`: the built site on 127.0.0.1, and the instruments answered live.

The standard library's http.server, bound to 127.0.0.1 only, one request at a time. Besides the
site's files it answers, as JSON, the same functions the static build precomputes
(instruments.py) for any input: GET /api/roofline, /api/blockspec (with the real compiler's
verdict: the tpu-compile extra), /api/timeline (a shipped schedule played by the learner's own
simulate()), /api/mesh; and POST /api/tick, which records a self-test tick as `tpucourse tick`
does (the learner's word, never checked).
"""

from __future__ import annotations

import json
from functools import partial
from http.server import HTTPServer, SimpleHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from ..learner import self_test
from ..learner.requests import RequestError, course_here
from . import instruments

HOST = "127.0.0.1"


def _one(query: dict, name: str, default: str | None = None) -> str:
    values = query.get(name)
    if not values:
        if default is None:
            raise ValueError(f"missing ?{name}=")
        return default
    return values[0]


def answer(course_root: Path, path: str, query: dict) -> dict:
    """The JSON answer of one GET /api/... request."""
    if path == "/api/ping":
        return {"serve": True}
    if path == "/api/roofline":
        return instruments.predict(_one(query, "chip"), _one(query, "op"), _one(query, "shape"),
                                   _one(query, "dtype", "bfloat16"))
    if path == "/api/blockspec":
        return instruments.blockspec(_one(query, "shape"), _one(query, "block"), _one(query, "dtype"),
                                     compiler=True)
    if path == "/api/timeline":
        return instruments.learner_timeline(course_root, _one(query, "schedule"), int(_one(query, "devices")))
    if path == "/api/mesh":
        return instruments.mesh(_one(query, "chip"), _one(query, "topology"), _one(query, "op"),
                                _one(query, "bytes"))
    raise LookupError(path)


def tick(course_root: Path, body: dict) -> dict:
    """POST /api/tick {"chapter": "ch15", "item": 3, "undo": false}: what `tpucourse tick` does and
    prints (learner/self_test.py's tick, for the course at course_root)."""
    chapter, item, undo = str(body.get("chapter", "")), int(body.get("item", 0)), bool(body.get("undo", False))
    lines = self_test.tick(course_here(course_root), chapter, item, undo=undo)
    return {"printed": "".join(f"{line}\n" for line in lines)}


class Handler(SimpleHTTPRequestHandler):
    course_root: Path

    def log_message(self, format, *args):  # one line per API call only; files are quiet
        if self.path.startswith("/api/"):
            super().log_message(format, *args)

    def _json(self, status: int, value: dict) -> None:
        data = json.dumps(value).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
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
        if not self._from_this_site():
            self._json(403, {"error": "the course's API answers the course site's own pages only"})
            return
        try:
            self._json(200, call())
        except LookupError:
            self._json(404, {"error": f"no such endpoint {urlparse(self.path).path}"})
        except (ValueError, RequestError) as error:
            self._json(400, {"error": str(error)})

    def do_GET(self):
        url = urlparse(self.path)
        if url.path.startswith("/api/"):
            self._api(lambda: answer(self.course_root, url.path, parse_qs(url.query)))
        else:
            super().do_GET()

    def do_POST(self):
        url = urlparse(self.path)
        if url.path != "/api/tick":
            self._json(404, {"error": f"no such endpoint {url.path}"})
            return
        if self.headers.get("Content-Type", "").split(";")[0].strip() != "application/json":
            self._json(415, {"error": "POST /api/tick takes a JSON object (Content-Type: application/json)"})
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        except (ValueError, UnicodeDecodeError) as error:
            self._json(400, {"error": f"not JSON: {error}"})
            return
        if not isinstance(body, dict):
            self._json(400, {"error": "POST /api/tick takes a JSON object: {\"chapter\": ..., \"item\": ...}"})
            return
        self._api(lambda: tick(self.course_root, body))


def make_server(site: Path, course_root: Path, port: int) -> HTTPServer:
    handler = type("CourseHandler", (Handler,), {"course_root": Path(course_root)})
    return HTTPServer((HOST, port), partial(handler, directory=str(site)))


def serve(server: HTTPServer) -> None:
    """Answer requests until Ctrl-C, then close the socket."""
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
