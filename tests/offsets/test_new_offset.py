"""A sampled offset is one module for the Gibbs sweep: a probe offset (a global level
``s_k = mu`` with ``mu ~ N(0, 1)``) added to a copy of the package as
``offsets/probe_level.py`` alone is sampled by the sweep (its block, the factor blocks
fitting the ratings minus it, its draws, the predictions including it, the checkpoint's
state) and its NumPyro statement is in the model, without any other file changing."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from _package_copy import copy_package, run_side_by_side

MODULE = textwrap.dedent(
    '''
    """A probe offset: one level added to every rating."""

    import dataclasses
    from typing import ClassVar

    import jax
    import jax.numpy as jnp

    from .base import Offset


    @dataclasses.dataclass(frozen=True)
    class ProbeLevel(Offset):
        name: ClassVar[str] = "probe_level"

        def arrays(self, context, n, dtype):
            return {"one": jnp.ones(n, dtype)}

        def gibbs_state(self, arrays, C, dtype):
            return {"mu": jnp.zeros((C,), dtype)}

        def shift(self, state, arrays):
            return state["mu"][:, None] * arrays["one"]

        def sample(self, ratings):
            import numpyro
            import numpyro.distributions as dist

            mu = numpyro.sample("probe_level_mu", dist.Normal(0.0, 1.0))
            return jnp.full(ratings.n, mu)

        def gibbs_update(self, key, state, arrays, target, precision):
            prec = 1.0 + jnp.sum(precision, axis=1)
            mean = jnp.sum(precision * target, axis=1) / prec
            z = jax.vmap(lambda k: jax.random.normal(k, (), prec.dtype))(key)
            return {"mu": mean + z / jnp.sqrt(prec)}
    '''
)

CHECKS = textwrap.dedent(
    """
    import sys
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_enable_x64", True)
    import bmczoo as bmc
    assert bmc.__file__.startswith(sys.argv[1]), bmc.__file__
    from bmczoo.inference import gibbs
    from bmczoo.inference.gibbs import driver
    from bmczoo.offsets.probe_level import ProbeLevel

    rng = np.random.default_rng(0)
    r, c = np.nonzero(rng.random((30, 20)) < 0.4)
    theta = (rng.normal(size=(30, 2)) @ rng.normal(size=(20, 2)).T)[r, c]
    data = bmc.RatingData(r, c, 3.0 + theta + 0.5 * rng.normal(size=r.size), (30, 20))
    train, test = data.split(0.2, seed=0)
    prior = bmc.priors.InverseGamma()
    p = gibbs.build_problem(
        train, 1.0, dtype=jnp.float64, prior=prior, offsets=(ProbeLevel(),),
        likelihood=bmc.likelihoods.LearnedNoise(),
        entries=gibbs.Entries(predict=(test.rows, test.cols), context=test.context),
    )
    st = gibbs.init(jax.random.split(jax.random.key(0), 2), p, prior, 2)
    sweep = jax.jit(lambda s: gibbs.sweep(s, p, prior))
    mus = []
    for i in range(300):
        st = sweep(st)
        mus.append(np.asarray(st.offset_state["probe_level"]["mu"]))
    mus = np.concatenate(mus[100:])
    assert abs(mus.mean() - train.values.mean()) < 0.5, (mus.mean(), train.values.mean())
    d = gibbs.draws(st, p)
    assert "probe_level_mu" in d, sorted(d)
    e = p.entries
    np.testing.assert_allclose(
        np.asarray(gibbs.entries(st, p, e.pred_rows, e.pred_cols, "pred")),
        np.asarray(gibbs.entries(st, p, e.pred_rows, e.pred_cols)) + np.asarray(d["probe_level_mu"])[:, None],
    )
    back = driver._restore_state(driver._state_arrays(st, p), p)
    assert np.array_equal(back.offset_state["probe_level"]["mu"], st.offset_state["probe_level"]["mu"])
    import numpyro
    with numpyro.handlers.seed(rng_seed=0):
        tr = numpyro.handlers.trace(bmc.models.matrix_completion).get_trace(
            train, 2, prior, offsets=(ProbeLevel(),)
        )
    assert "probe_level_mu" in tr, sorted(tr)
    print("ok")
    """
)


def test_new_offset_module_in_the_sweep(tmp_path):
    dst, changed = copy_package(
        tmp_path, lambda pkg: (pkg / "offsets" / "probe_level.py").write_text(MODULE)
    )
    assert changed == {Path("offsets/probe_level.py")}  # one file, nothing else
    outs = run_side_by_side({"python": [sys.executable, "-c", CHECKS, str(dst)]}, tmp_path)
    assert outs["python"].strip().endswith("ok")
