"""Shared fixtures of the bmczoo test-suite.

Float64 is enabled per test through the ``x64`` fixture (a context manager around the
test), never globally, so that the default float32 behaviour stays what the other tests
see.  (JAX 0.10 removed ``jax.experimental.enable_x64``; ``jax.enable_x64(True)`` is the
same context manager under its current name.)
"""

from __future__ import annotations

import os
from pathlib import Path

# JAX's persistent compilation cache, shared by every test process of a run (xdist workers,
# the subprocess tests, the notebooks' kernels: they inherit these variables) and by later
# runs.  Most of the suite's time is XLA compilation of the same programs in many tests
# (each fit builds fresh jitted closures, so JAX's in-memory cache misses); the cache is
# keyed by the program, JAX's version and the compile options, so a hit is the program a
# compilation would give.  Set JAX_COMPILATION_CACHE_DIR to put it elsewhere; delete
# ``.jax_cache/`` to reclaim the space.
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".jax_cache")
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")
# The programs the tests compile are small and run briefly, so compiling them costs more
# than running them: the suite compiles with XLA's CPU backend optimisation (LLVM's passes)
# off, in one piece rather than split for parallel code generation (two test processes
# already share two cores), and with XLA's older elemental emitters instead of its fusion
# emitters.  Six typical fits in one process (cold cache): 48-53 s with the optimisation
# off alone, 26-30 s with all four flags; the default suite went from 17:11 to 13:13.
# They change how the code is generated, not what is computed (no fast-math either way;
# tests compare paths within one process or with tolerances).  The benchmarks run at
# XLA's defaults.  BMCZOO_TEST_XLA_OPT=1 keeps XLA's defaults (XLA_FLAGS is read when the
# backend starts, after this file; the child processes of the tests inherit it).
_FAST_COMPILE = [
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
    "--xla_cpu_parallel_codegen_split_count=1",
    "--xla_cpu_use_fusion_emitters=false",
]


def _xla_flags_with(flags: list[str]) -> str:
    """``XLA_FLAGS`` with ``flags`` appended."""
    return " ".join([os.environ.get("XLA_FLAGS", ""), *flags]).strip()


def _xla_accepts(flags: list[str]) -> bool:
    """Whether this jaxlib starts its CPU backend with ``flags`` (XLA aborts on a flag it
    does not know, and a newer jaxlib may drop one): tried in a child process, once per
    test run (the workers inherit the result in ``XLA_FLAGS``)."""
    import subprocess
    import sys

    env = {**os.environ, "XLA_FLAGS": _xla_flags_with(flags), "JAX_PLATFORMS": "cpu"}
    try:
        res = subprocess.run(
            [sys.executable, "-c", "import jax; jax.devices()"],
            env=env,
            capture_output=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        return False
    return res.returncode == 0


if os.environ.get(
    "BMCZOO_TEST_XLA_OPT", "0"
) != "1" and "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    for _flags in (_FAST_COMPILE, _FAST_COMPILE[:2]):
        if _xla_accepts(_flags):
            os.environ["XLA_FLAGS"] = _xla_flags_with(_flags)
            break

import jax  # noqa: E402  (after the cache's environment variables, which JAX reads at import)

# a plugin may have imported JAX before this file: set the same values explicitly
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update(
    "jax_persistent_cache_min_compile_time_secs",
    float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]),
)
jax.config.update(
    "jax_persistent_cache_min_entry_size_bytes",
    int(os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"]),
)
import numpy as np  # noqa: E402 - after the compilation cache settings above
import pytest  # noqa: E402


# MovieLens 100K is not shipped with the repository: the tests that need it read the
# extracted archive from $BMCZOO_ML100K or from the repository's neighbour folder, and are
# skipped, saying how to provide it, where it is absent.
ML100K_ENV = "BMCZOO_ML100K"
ML100K_URL = "https://files.grouplens.org/datasets/movielens/ml-100k.zip"


def ml100k_folder() -> Path:
    """The MovieLens 100K folder the tests read: ``$BMCZOO_ML100K`` (the extracted
    ``ml-100k`` folder, or its ``u.data``, whose folder is taken) or else the repository's
    neighbour ``../shared/data/ml-100k``."""
    value = os.environ.get(ML100K_ENV)
    if value:
        path = Path(value)
        return path.parent if path.is_file() else path
    return Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ml-100k"


def ml100k_skip_reason(files=("u.data",)) -> str | None:
    """Why a test needing MovieLens 100K's ``files`` is skipped (None: they are all there),
    with how to provide them."""
    folder = ml100k_folder()
    missing = [name for name in files if not (folder / name).is_file()]
    if not missing:
        return None
    source = f"${ML100K_ENV}" if os.environ.get(ML100K_ENV) else "the default folder"
    return (
        f"MovieLens 100K: {', '.join(missing)} not found in {folder} ({source}); extract "
        f"{ML100K_URL} and set {ML100K_ENV} to its ml-100k folder, or put that folder at "
        f"../shared/data/ml-100k beside the repository"
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "requires_ml100k(*files): skipped, with how to provide the data, unless MovieLens "
        "100K's files (default u.data) are in $BMCZOO_ML100K or ../shared/data/ml-100k",
    )


def pytest_collection_modifyitems(config, items):
    """Skip the tests marked ``requires_ml100k`` whose files are absent."""
    reasons: dict[tuple, str | None] = {}
    for item in items:
        mark = item.get_closest_marker("requires_ml100k")
        if mark is None:
            continue
        files = tuple(mark.args) or ("u.data",)
        if files not in reasons:
            reasons[files] = ml100k_skip_reason(files)
        if reasons[files]:
            item.add_marker(pytest.mark.skip(reason=reasons[files]))


@pytest.fixture(scope="session")
def ml100k() -> Path:
    """The MovieLens 100K folder (holding ``u.data``); the test is skipped, saying how to
    provide it, where it is absent.  Tests that need more of its files say so with
    ``@pytest.mark.requires_ml100k("u.user", ...)``."""
    reason = ml100k_skip_reason()
    if reason:
        pytest.skip(reason)
    return ml100k_folder()


@pytest.fixture(autouse=True, scope="module")
def _drop_compiled_programs():
    """Drop JAX's compiled programs after each test module.

    Libraries keep jitted functions in process-wide caches (NumPyro's ``fori_collect``
    takes the sampler's loop body as a static argument: one program per run), so a long
    test process accumulates thousands of compiled programs; the slow suite once crashed
    inside XLA compilation after hours of that.  Clearing per module bounds it."""
    yield
    import gc

    jax.clear_caches()
    gc.collect()


@pytest.fixture
def x64():
    """Run the test with ``jax_enable_x64`` on (restored afterwards)."""
    with jax.enable_x64(True):
        yield


@pytest.fixture
def tiny_ratings():
    """A 6 x 5 matrix with 18 observed entries of a rank-2 signal plus noise (float64)."""
    import bmczoo as bmc

    rng = np.random.default_rng(12345)
    m1, m2 = 6, 5
    keys = rng.choice(m1 * m2, size=18, replace=False)
    rows, cols = np.divmod(keys, m2)
    U = rng.normal(size=(m1, 2))
    V = rng.normal(size=(m2, 2))
    vals = np.sum(U[rows] * V[cols], axis=1) + 0.3 * rng.normal(size=keys.size)
    return bmc.RatingData(rows, cols, vals, (m1, m2))
