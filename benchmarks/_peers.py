"""Shared by the benchmark scripts that time bmczoo's peers (SMURFF, myFM)."""

from __future__ import annotations

import platform
from pathlib import Path

__all__ = ["cpu_model", "importable"]


def cpu_model() -> str:
    """The CPU's model name (timings are compared only on one machine, in one run)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def importable(module: str) -> bool:
    """Whether ``module`` imports here (the peers are never dependencies of bmczoo)."""
    try:
        __import__(module)
    except Exception:  # noqa: BLE001 - any failure means the peer is not usable here
        return False
    return True
