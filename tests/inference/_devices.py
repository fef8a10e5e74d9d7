"""The environment of a child process that sees four CPU devices (the sharding tests)."""

from __future__ import annotations

import os


def four_cpu_devices_env() -> dict:
    """``os.environ`` with four host CPU devices and the CPU platform.

    The device count is appended to ``XLA_FLAGS``, so the suite's other XLA flags (set in
    ``tests/conftest.py``) carry over; XLA reads them when the child's backend starts."""
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4".strip()
    return {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
