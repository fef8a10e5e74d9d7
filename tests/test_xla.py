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
    out = subprocess.run(
        [sys.executable, "-c", "import os, bmczoo; print(os.environ['XLA_FLAGS'])"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
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


def _runs_to_the_end(program: str, env: dict, timeout: float, what: str) -> None:
    """Run ``program`` in a fresh Python process; it must print ``done True`` in time."""
    try:
        out = subprocess.run(
            [sys.executable, "-c", program],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} did not finish in {timeout:g} s (XLA stopped?)")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["done", "True"]


def test_program_that_stopped_under_the_scheduler_runs():
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split() if FLAG not in f)
    _runs_to_the_end(_HANG, env, 240, "the four-chain implicit-feedback fit")


@pytest.mark.parametrize("version", ["0.10.0", "0.10.2"])
def test_configure_pool_sets_the_pool_size_for_affected_jaxlib(monkeypatch, version):
    monkeypatch.setattr(_xla, "_backend_started", lambda: False)
    env = {}
    assert _xla.configure_pool(env, jaxlib_version=version, cpu_count=2)
    assert env == {_xla.POOL_VARIABLE: "4"}
    env = {}
    assert _xla.configure_pool(env, jaxlib_version=version, cpu_count=16)
    assert env[_xla.POOL_VARIABLE] == "18"


@pytest.mark.parametrize("version", ["0.9.2", "0.11.0", "0.11.2.dev20270101"])
def test_configure_pool_leaves_other_jaxlib_alone(monkeypatch, version):
    monkeypatch.setattr(_xla, "_backend_started", lambda: False)
    env = {}
    assert not _xla.configure_pool(env, jaxlib_version=version, cpu_count=2)
    assert env == {}


def test_configure_pool_keeps_the_users_choice_and_a_started_backend(monkeypatch):
    monkeypatch.setattr(_xla, "_backend_started", lambda: False)
    env = {_xla.POOL_VARIABLE: "3"}
    assert not _xla.configure_pool(env, jaxlib_version="0.10.2", cpu_count=2)
    assert env == {_xla.POOL_VARIABLE: "3"}
    monkeypatch.setattr(_xla, "_backend_started", lambda: True)
    env = {}
    assert not _xla.configure_pool(env, jaxlib_version="0.10.2", cpu_count=2)
    assert env == {}


# Four independent batched Cholesky factorisations in one program: with jaxlib 0.10's
# LAPACK kernels on a pool of two workers (a 2-core machine) every worker waited for
# pieces queued behind it and the call never returned.
_LAPACK = textwrap.dedent("""
    import bmczoo, jax, jax.numpy as jnp
    A = jax.random.normal(jax.random.key(0), (2000, 16, 16))
    P = A @ jnp.swapaxes(A, -1, -2) + 16 * jnp.eye(16)
    f = jax.jit(lambda P: [jnp.linalg.cholesky(P[i::4]) for i in range(4)])
    for _ in range(3):
        out = jax.block_until_ready(f(P))
    print("done", all(bool(jnp.all(jnp.isfinite(x))) for x in out))
""")


def test_concurrent_batched_lapack_calls_finish():
    env = {k: v for k, v in os.environ.items() if k != _xla.POOL_VARIABLE}
    _runs_to_the_end(_LAPACK, env, 180, "four concurrent batched Cholesky factorisations")


def test_compiler_options_by_platform():
    assert _xla.compiler_options("cpu") == _xla.CPU_COMPILER_OPTIONS
    assert _xla.compiler_options("gpu") == {} and _xla.compiler_options("tpu") == {}
    _xla.compiler_options("cpu")["xla_backend_optimization_level"] = 3  # a copy
    assert _xla.CPU_COMPILER_OPTIONS == {"xla_backend_optimization_level": 1}


def test_sweeps_compiled_with_the_options_equal_the_default_compilation():
    """Ten float64 sweeps of the recommended member (Normal-Wishart rows, learned noise,
    biases, four chains) compiled by :func:`_xla.compile` and by XLA's defaults: the same
    draws up to rounding (LLVM's optimisation level changes the order of a few floating
    point operations, nothing else)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import bmczoo as bmc
    from bmczoo.inference import gibbs

    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        pairs = rng.choice(40 * 30, size=500, replace=False)
        data = bmc.RatingData(
            pairs // 30, pairs % 30, rng.integers(1, 6, size=500).astype(float), (40, 30)
        )
        problem = gibbs.build_problem(
            data,
            tau=1.0,
            dtype=jnp.float64,
            likelihood=bmc.likelihoods.LearnedNoise(),
            biases=bmc.offsets.Biases(),
        )
        prior = bmc.priors.NormalWishart()
        state = gibbs.init(jax.random.split(jax.random.key(3), 4), problem, prior, 4)
        run = jax.jit(
            lambda s, p: jax.lax.fori_loop(0, 10, lambda i, s: gibbs.step(s, p, prior), s)
        )
        lowered = run.lower(state, problem)
        ours, default = _xla.compile(lowered)(state, problem), lowered.compile()(state, problem)
        for name in ("M", "N"):
            a, b = np.asarray(getattr(ours, name)), np.asarray(getattr(default, name))
            assert np.all(np.isfinite(a))
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * np.max(np.abs(b)))
