"""Exercise ch15.manifest: capstone.toml, as tomllib reads it."""

import tomllib
from pathlib import Path

MANIFEST = Path(__file__).with_name("capstone.toml")


def manifest() -> dict:
    """capstone.toml as a dict."""
    with open(MANIFEST, "rb") as f:
        return tomllib.load(f)
