"""Shared by the benchmark scripts that time bmczoo's peers (SMURFF, myFM)."""

from __future__ import annotations

__all__ = ["importable"]


def importable(module: str) -> bool:
    """Whether ``module`` imports here (the peers are never dependencies of bmczoo)."""
    try:
        __import__(module)
    except Exception:  # noqa: BLE001 - any failure means the peer is not usable here
        return False
    return True
