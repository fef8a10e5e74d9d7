"""bmc.enable_compilation_cache: where it stores programs, and that a later process reuses them."""

import os
import subprocess
import sys
import textwrap

from bmczoo._cache import default_compilation_cache_dir

_CHILD = textwrap.dedent("""
    import sys, jax, jax.numpy as jnp
    import bmczoo as bmc
    folder = bmc.enable_compilation_cache(sys.argv[1])
    print(folder)
    print(float(jax.jit(lambda x: jnp.sin(x) * 3.0 + 1.0)(jnp.arange(7.0)).sum()))
""")


def test_default_folder_follows_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("BMCZOO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_compilation_cache_dir() == tmp_path / "xdg" / "bmczoo" / "jax"
    monkeypatch.setenv("BMCZOO_CACHE", str(tmp_path / "own"))
    assert default_compilation_cache_dir() == tmp_path / "own" / "jax"


def test_programs_are_written_and_reused(tmp_path):
    folder = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env["JAX_PLATFORMS"] = "cpu"
    runs = [
        subprocess.run(
            [sys.executable, "-c", _CHILD, str(folder)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert runs[0].stdout.splitlines()[0] == str(folder)
    entries = sorted(p.name for p in folder.iterdir())
    assert entries, "nothing was written to the cache folder"
    assert runs[0].stdout == runs[1].stdout
    # the second process found the program and wrote no new entry
    assert sorted(p.name for p in folder.iterdir()) == entries
