"""Where and with what a gate row was produced: platform, device, versions, commit, host."""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Provenance:
    """Where and with what a row was produced."""

    platform: str
    device_kind: str
    jax: str
    jaxlib: str
    libtpu: str | None
    git_commit: str | None
    host: str


def provenance(platform: str, device_kind: str, root: Path) -> Provenance:
    import jax
    import jaxlib

    return Provenance(platform=platform, device_kind=device_kind, jax=jax.__version__,
                      jaxlib=jaxlib.__version__, libtpu=_libtpu_version(),
                      git_commit=_git_commit(root), host=socket.gethostname())


def _libtpu_version() -> str | None:
    from importlib import metadata

    for name in ("libtpu", "libtpu-nightly"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _git_commit(root: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
