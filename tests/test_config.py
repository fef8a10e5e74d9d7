"""``bmc.show_config()`` / ``bmczoo info`` and ``bmczoo --version``: what a bug report needs."""

from __future__ import annotations

import io
import tomllib
from pathlib import Path

import jax
import pytest

import bmczoo as bmc
from bmczoo import _config, _native, linalg
from bmczoo.cli import main

ROOT = Path(__file__).parents[1]


def test_config_reports_what_is_in_use():
    c = _config.config()
    assert c["bmczoo"] == bmc.__version__
    assert c["dependencies"]["jax"] == jax.__version__
    assert c["backend"] == jax.default_backend()
    assert len(c["devices"]) == len(jax.devices())
    assert c["hot_path"] == {
        "setting": linalg.get_hot_path(),
        "resolved": linalg.resolve_hot_path(),
    }
    loaded, detail = _native.status()
    assert c["kernel"]["loaded"] is loaded and c["kernel"]["detail"] == detail


def test_show_config_prints_one_line_per_topic():
    out = io.StringIO()
    bmc.show_config(file=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"bmczoo {bmc.__version__} (Python ")
    assert f"jax {jax.__version__}" in lines[1]
    assert lines[2].startswith(f"JAX backend: {jax.default_backend()}")
    assert lines[3] == f"hot path: {linalg.get_hot_path()} -> {linalg.resolve_hot_path()}"
    assert lines[4].startswith("compiled Gram kernel (BMCZOO_NATIVE: ")
    assert ("loaded from" in lines[4]) is _native.status()[0]


def test_cli_info_and_version(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"bmczoo {bmc.__version__} (Python ") and "hot path:" in out
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"bmczoo {bmc.__version__}"


def test_declared_versions_agree():
    """The package's version is pyproject's; the build's jaxlib (the kernel's FFI headers)
    has the lower bound the runtime's jax has."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["version"] == bmc.__version__
    (jax_dep,) = [d for d in meta["project"]["dependencies"] if d.startswith("jax>")]
    (jaxlib_build,) = [d for d in meta["build-system"]["requires"] if d.startswith("jaxlib")]
    assert jaxlib_build.removeprefix("jaxlib") == jax_dep.removeprefix("jax")
