"""A gradebook's keyed digest: `--merge` takes only the shards the instructor's key wrote.

The instructor keeps a key in a file outside every tree (`--key FILE`; no sandbox sees it).
Each gradebook written with it carries `"digest": {"hmac-sha256": HEX}`, an HMAC of the rest of
the gradebook (its JSON with sorted keys and no spaces) under a key derived from the file's
bytes. `--merge` verifies every shard with the same key and refuses one that does not verify
(changed since, written with another key, or without one); the merged gradebook is signed in
turn. The same file seeds what else the instructor's secret decides (each use derives its own
key from it, so one never reveals another).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
from pathlib import Path

DIGEST = "digest"
ALGORITHM = "hmac-sha256"
_LABEL = b"tpucourse gradebook digest\0"


class KeyFileError(ValueError):
    """A key file that cannot be used."""


def read_key(path: Path | str) -> bytes:
    """The key file's bytes: a regular file, not empty."""
    path = Path(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"--key {path}: not a regular file")
        secret = path.read_bytes()
    except OSError as error:
        raise KeyFileError(f"--key {path}: {error.strerror or error}") from None
    if not secret.strip():
        raise KeyFileError(f"--key {path}: the file is empty (make one: head -c 32 /dev/urandom > {path})")
    return secret


def key_is_private(path: Path | str) -> bool:
    """Whether only its owner may read the key file."""
    return not (os.stat(path).st_mode & 0o077)


def _canonical(book: dict) -> bytes:
    body = {k: v for k, v in book.items() if k != DIGEST}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def digest(book: dict, secret: bytes) -> str:
    key = hashlib.sha256(_LABEL + secret).digest()
    return hmac.new(key, _canonical(book), hashlib.sha256).hexdigest()


def sign(book: dict, secret: bytes) -> dict:
    """The gradebook with its digest (last in the file)."""
    body = {k: v for k, v in book.items() if k != DIGEST}
    return {**body, DIGEST: {ALGORITHM: digest(body, secret)}}


def problem(book: dict, secret: bytes) -> str:
    """Why the gradebook does not verify with this key, or "" when it does."""
    carried = book.get(DIGEST)
    if not isinstance(carried, dict) or not isinstance(carried.get(ALGORITHM), str):
        return "it carries no digest (written without --key)"
    if not hmac.compare_digest(carried[ALGORITHM], digest(book, secret)):
        return "its digest does not verify with this key (changed since it was written, or written with another key)"
    return ""
