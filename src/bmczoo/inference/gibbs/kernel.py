"""NumPyro ``MCMCKernel`` adapter of the conjugate Gibbs sampler.

Usage::

    from numpyro.infer import MCMC
    kernel = ConjugateGibbs(bmc.models.matrix_completion, thinning=10, num_samples=900)
    mcmc = MCMC(kernel, num_warmup=100, num_samples=900, thinning=10, num_chains=4,
                chain_method="vectorized")
    mcmc.run(jax.random.key(0), train, 5, bmc.priors.Discrete())
    mcmc.get_samples()["gamma"]

The model arguments are those of :func:`bmczoo.models.matrix_completion`; the kernel
reads them at ``init`` and samples the same posterior with its exact conditionals.
With ``chain_method="vectorized"`` the chains are advanced together by one batched
sweep (not ``vmap``), which keeps the sparse products on JAX's fast path.

ArviZ: ``az.from_numpyro(mcmc)`` works for every prior.  ``theta`` holds the draws at the
tracked entries (``track``: by default 8 observed entries; ``theta`` is ``M_i . N_j``
plus the biases, on the scale of the ratings given to ``mcmc.run`` minus ``offset``).
With ``store_factors=True`` the draws of every latent site are collected, so ArviZ also
builds the ``log_likelihood`` (pointwise ``log p(y_k | draw)`` of the ratings, for
``az.loo``/``az.waic``/``az.compare``) and ``observed_data`` groups from the model;
without it the model that :attr:`ConjugateGibbs.model` reports to ArviZ hides the
observed site (the pointwise likelihood needs the factor draws), and the conversion
gives the posterior alone.
"""

from __future__ import annotations

import functools
import inspect
from typing import NamedTuple

import jax
import numpyro
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import is_prng_key

from ..._checks import check_dtype, check_K, check_prior, check_ratings
from ...models import matrix_completion
from ...models.matrix_completion import model_likelihood
from ...offsets import get_biases
from ..settings import SweepOptions, check_known
from .sampler import step
from .state import Entries, GibbsProblem, GibbsState, Schedule, build_problem, draws, init
from ..problem import track_entries

__all__ = ["ConjugateGibbs", "ConjugateGibbsState"]


class ConjugateGibbsState(NamedTuple):
    """What NumPyro carries between iterations: the core state, the problem's device data
    (carried rather than closed over, so large arrays are never baked into the compiled
    program) and ``z``, the per-draw values NumPyro collects."""

    core: GibbsState
    problem: GibbsProblem
    z: dict
    rng_key: jax.Array


class ConjugateGibbs(MCMCKernel):
    """Blocked conjugate Gibbs sampler for :func:`bmczoo.models.matrix_completion`.

    Parameters
    ----------
    model : callable
        The model whose arguments ``mcmc.run`` receives: :func:`bmczoo.models.matrix_completion`
        or a function with its arguments (``ratings, K, prior`` and optionally ``lam,
        noise_sd, likelihood, biases``) and semantics; the kernel binds the arguments to this
        model's signature and samples its posterior with the exact conditionals (it does
        not trace the model).
    num_samples, thinning : int, optional
        The values given to ``MCMC``; they align the kernel's running posterior mean with
        the draws NumPyro keeps (after warm-up, every ``thinning``-th) and size the RMSE
        traces.  Without ``num_samples`` no RMSE trace is kept.
    predict : (rows, cols), optional
        Entries whose posterior mean of ``theta`` is accumulated (``state.core.stats.pred_sum``).
    test_values : array, optional
        Observed values at ``predict`` (original scale): enables the RMSE traces.
    offset : float
        Added to ``theta`` to predict (the training mean when the data were centred).
    clip : (lo, hi), optional
        Prediction range used for the RMSE traces.
    track : (rows, cols) or int, optional
        Entries whose ``theta`` is collected for every kept draw (``z["theta"]``); an int
        ``k``: ``k`` observed entries drawn uniformly without replacement with
        ``numpy.random.default_rng(0)`` (sorted; ``bmczoo.inference.problem.track_entries``);
        default 8; None or 0: none.
    store_factors : bool
        Also collect ``M`` and ``N`` (and the biases) for every kept draw: then every
        latent site of the model is collected and ``az.from_numpyro`` adds the pointwise
        ``log_likelihood`` and ``observed_data`` groups.
    dtype : dtype, optional
        Float dtype of the sampler (default: float64 if x64 is enabled, else float32).
    devices : sequence of jax devices or Mesh, optional
        Shard each sweep over these devices (:mod:`bmczoo.inference.sharding`); the draws
        equal those of a single-device run with the same key.
    **options
        The sweep's options, the fields of :class:`~bmczoo.inference.settings.SweepOptions`
        (``overrelax``, ``column_moves``, ``column_moves_every``, ``fuse_column_moves``,
        ``anneal_steps``, ``anneal_every``, ``gamma_sampler``, ``row_draw``), with their
        defaults; an unknown name is a ``TypeError`` naming the closest option.

    After ``mcmc.run``, :func:`bmczoo.inference.gibbs.check_failure` on
    ``mcmc.last_state.core`` raises if any draw was non-finite (``bmc.fit`` does this).
    """

    sample_field = "z"

    def __init__(
        self,
        model=matrix_completion,
        *,
        num_samples: int | None = None,
        thinning: int = 1,
        predict=None,
        test_values=None,
        offset: float = 0.0,
        clip=None,
        track=8,
        store_factors: bool = False,
        dtype=None,
        devices=None,
        **options,
    ):
        self._model = model
        self._num_samples = num_samples
        self._thinning = int(thinning)
        self._entries = Entries(
            predict=predict, test_values=test_values, offset=float(offset), clip=clip
        )
        self._track = track
        self._store_factors = bool(store_factors)
        self._dtype = dtype
        self._devices = devices
        check_known(options, SweepOptions.field_names(), where="ConjugateGibbs()")
        self._options = SweepOptions(**options)
        self._prior = None
        self._batched = False

    @property
    def model(self):
        """The model, as ArviZ and other NumPyro tools see it: the model given when the
        factor draws are collected (``store_factors=True``); otherwise the same model with
        its observed site hidden (``__wrapped__`` is the model given), since without the
        draws of ``M`` and ``N`` the pointwise likelihood cannot be evaluated."""
        if self._store_factors:
            return self._model
        return _without_likelihood(self._model)

    @property
    def default_fields(self):
        return ("z",)

    def _z(self, core: GibbsState, problem: GibbsProblem) -> dict:
        z = draws(core, problem, self._store_factors)
        if not self._batched:
            z = jax.tree.map(lambda x: x[0], z)
        return z

    def _model_arguments(self, model_args, model_kwargs) -> dict:
        """The model's arguments by name (the kernel samples the model's posterior from its
        arguments with the exact conditionals; it does not trace the model)."""
        try:
            bound = inspect.signature(self._model).bind(*model_args, **model_kwargs)
        except TypeError as err:
            raise TypeError(
                f"ConjugateGibbs: the arguments do not fit the model {self._model!r}: {err}"
            ) from None
        bound.apply_defaults()
        a = bound.arguments
        missing = {"ratings", "K", "prior"} - set(a)
        if missing:
            raise ValueError(
                f"ConjugateGibbs samples bmczoo.models.matrix_completion-like models; "
                f"{self._model!r} has no argument {', '.join(sorted(missing))}"
            )
        return a

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        a = self._model_arguments(model_args, model_kwargs)
        ratings = check_ratings(a["ratings"])
        self._prior = check_prior(a["prior"])
        self._K = check_K(a["K"], ratings.shape)
        likelihood = model_likelihood(a.get("likelihood"), a.get("lam"), a.get("noise_sd", 1.0))
        tau = likelihood.precision(ratings.n)
        biases = get_biases(a.get("biases"))
        track = track_entries(ratings, self._track, seed=0)
        dtype = self._dtype or check_dtype()
        num_total = num_warmup + self._num_samples if self._num_samples is not None else 0
        problem = build_problem(
            ratings,
            tau,
            dtype=dtype,
            entries=self._entries._replace(track=track),
            schedule=Schedule(num_warmup, self._thinning, num_total),
            options=self._options,
            mesh=self._devices,
            likelihood=likelihood,
            biases=biases,
            prior=self._prior,
        )
        self._batched = not is_prng_key(rng_key)
        keys = rng_key if self._batched else rng_key[None]
        init_kw = {}
        if init_params is not None:
            init_kw = {k: (v if self._batched else v[None]) for k, v in dict(init_params).items()}
        core = init(keys, problem, self._prior, self._K, **init_kw)
        return ConjugateGibbsState(core, problem, self._z(core, problem), rng_key)

    def sample(self, state, model_args, model_kwargs):
        core = step(state.core, state.problem, self._prior)
        return ConjugateGibbsState(core, state.problem, self._z(core, state.problem), state.rng_key)

    def postprocess_fn(self, model_args, model_kwargs):
        return lambda z: z

    def get_diagnostics_str(self, state):
        core = state.core
        if core.stats.rmse_mean.shape[-1] == 0:
            return ""
        i = int(core.iteration) - 1
        return f"rmse(draw) {float(core.stats.rmse_draw[0, i]):.4f}"


@functools.lru_cache(maxsize=32)
def _without_likelihood(model):
    """``model`` with its observed sites hidden from the handlers outside it."""

    @functools.wraps(model)
    def model_without_likelihood(*args, **kwargs):
        with numpyro.handlers.block(hide_fn=lambda site: bool(site.get("is_observed", False))):
            return model(*args, **kwargs)

    return model_without_likelihood
