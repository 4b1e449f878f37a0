"""Exercise ch15.manifest: the capstone's claims, read from capstone.toml beside this file."""

import tomllib
from pathlib import Path

MANIFEST = Path(__file__).with_name("capstone.toml")


def manifest() -> dict:
    """capstone.toml as a dict."""
    return tomllib.loads(MANIFEST.read_text(encoding="utf-8"))
