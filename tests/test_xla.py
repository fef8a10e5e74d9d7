"""bmczoo's XLA settings (:mod:`bmczoo._xla`): the option is added once, a user's own
choice is kept, and the program that stopped forever under XLA's concurrency-optimised
scheduler runs to the end."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from bmczoo import _xla

FLAG = _xla.SCHEDULER_FLAG


def test_configure_appends_the_flag(monkeypatch):
    monkeypatch.setattr(_xla, "_backend_started", lambda: False)
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    assert _xla.configure(env)
    assert env["XLA_FLAGS"] == f"--xla_force_host_platform_device_count=2 {FLAG}=false"
    assert not _xla.configure(env)  # once
    assert env["XLA_FLAGS"].count(FLAG) == 1
    empty = {}
    assert _xla.configure(empty) and empty["XLA_FLAGS"] == f"{FLAG}=false"


def test_configure_keeps_the_users_choice(monkeypatch):
    monkeypatch.setattr(_xla, "_backend_started", lambda: False)
    env = {"XLA_FLAGS": f"{FLAG}=true"}
    assert not _xla.configure(env)
    assert env["XLA_FLAGS"] == f"{FLAG}=true"


def test_configure_leaves_a_started_backend_alone(monkeypatch):
    monkeypatch.setattr(_xla, "_backend_started", lambda: True)
    env = {}
    assert not _xla.configure(env)
    assert env == {}


def test_import_sets_the_flag_in_a_fresh_process():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", "import os, bmczoo; print(os.environ['XLA_FLAGS'])"],
                         env=env, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == f"{FLAG}=false"


# Four chains, implicit feedback on both sides, learned noise: under the concurrency-optimised
# scheduler the first call of the sweeps' program never returned (all of XLA's workers idle).
_HANG = textwrap.dedent("""
    import numpy as np, bmczoo as bmc
    rng = np.random.default_rng(0)
    m1, m2, n = 300, 800, 8000
    key = np.unique(rng.integers(0, m1, n) * m2 + rng.integers(0, m2, n))
    data = bmc.RatingData(key // m2, key % m2, rng.integers(1, 6, len(key)).astype(float), shape=(m1, m2))
    fit = bmc.fit(data, K=10, prior=bmc.priors.NormalWishart(implicit=True), likelihood=bmc.likelihoods.LearnedNoise(),
                  biases=True, num_warmup=2, num_samples=2, thinning=1, num_chains=4, seed=0, progress_bar=False)
    print("done", fit.rmse(data) > 0)
""")


def test_program_that_stopped_under_the_scheduler_runs():
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split() if FLAG not in f)
    try:
        out = subprocess.run([sys.executable, "-c", _HANG], env=env, capture_output=True, text=True,
                             timeout=240, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("the four-chain implicit-feedback fit did not finish in 240 s (XLA stopped?)")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["done", "True"]
