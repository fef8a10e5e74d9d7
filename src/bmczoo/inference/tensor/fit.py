"""``bmc.fit`` on a :class:`~bmczoo.data.TensorData`: the CP Gibbs sampler's driver and its
result, :class:`TensorFit` (predictions, intervals, RMSE, log predictive density, the
rank posterior, ArviZ data, save and load)."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from ..._arviz import FitArrays, arrays_to_arviz
from ...data import TensorData
from .. import saving
from .. import settings as st
from ..info import FitInfo
from . import core

__all__ = ["TensorFit", "fit_tensor", "fit_tensor_nuts", "fit_tensor_svi"]

#: the largest block of (draws x entries) values computed at once by the outputs
_BLOCK = 2**22


def _runner(prior, likelihood, biases, moves: int):
    """A compiled call that runs ``num_kept x thin`` sweeps from the global sweep
    ``start`` and returns the last state, the state after every ``thin`` sweeps (the kept
    draws, stacked on a leading axis) and their ``theta`` at the test entries;
    ``moves``: the column moves every ``moves``-th sweep (0: none)."""

    def run(state, problem, test_index, start, num_kept, thin):
        def sweep_at(s, i):
            if not moves:
                return core.sweep(s, problem, prior, likelihood, biases, False)
            return jax.lax.cond(
                i % moves == 0,
                lambda s: core.sweep(s, problem, prior, likelihood, biases, True),
                lambda s: core.sweep(s, problem, prior, likelihood, biases, False),
                s,
            )

        def inner(carry, _):
            s, i = carry
            return (sweep_at(s, i), i + 1), None

        def kept(carry, _):
            carry, _ = jax.lax.scan(inner, carry, None, length=thin)
            s = carry[0]
            return carry, (s._replace(key=None), core.theta_at(s.U, s.bias, test_index))

        (state, _), (states, th) = jax.lax.scan(kept, (state, start), None, length=num_kept)
        return state, states, th

    return jax.jit(run, static_argnums=(4, 5))


def _blocks(n: int, size: int = 50) -> list[int]:
    """``n`` split into at most two block sizes (so that at most two programs compile)."""
    if n <= size:
        return [n] if n else []
    q, r = divmod(n, size)
    return [size] * q + ([r] if r else [])


def fit_tensor(
    train: TensorData,
    info: FitInfo,
    test: TensorData | None,
    progress_bar: bool,
) -> "TensorFit":
    """Run the chains of ``info.settings`` (:class:`~bmczoo.inference.settings.Gibbs`) on
    ``train`` (the values the model fits: centred by the caller; the CP model of
    :mod:`bmczoo.inference.tensor.core`) and keep every ``thinning``-th post-warm-up draw
    of the factors, the column scales, ``tau`` and the biases.  The sweeps run in blocks
    of kept draws, each one compiled call; the timing excludes the compilation."""
    from tqdm.auto import tqdm

    s = info.settings
    dtype = jnp.dtype(info.dtype)
    problem = core.build_problem(train, info.tau, dtype)
    keys = jax.random.split(jax.random.key(info.seed), s.num_chains)
    state = core.init(keys, problem, info.prior, info.K, biases=info.biases)
    if s.init_gamma is not None:  # e.g. the discrete prior's spike start
        g = jnp.broadcast_to(jnp.asarray(s.init_gamma, dtype), state.gamma.shape)
        state = state._replace(gamma=g)
    test_index = jnp.asarray(
        np.zeros((0, train.ndim), np.int32) if test is None else test.indices, jnp.int32
    )
    # the column moves on the prior's schedule (column_moves_every)
    moves = int(s.column_moves_every or 1) if s.column_moves and info.prior.has_column_move else 0
    run = _runner(info.prior, info.likelihood, info.biases, moves)
    start = jnp.asarray(0, jnp.int32)
    t0 = time.perf_counter()
    if s.num_warmup:
        state, _, _ = run(state, problem, test_index, start, 1, s.num_warmup)
        jax.block_until_ready(state)
    seconds = [time.perf_counter() - t0]
    blocks = _blocks(s.num_samples // s.thinning)
    compiled = {
        B: run.lower(state, problem, test_index, start, B, s.thinning).compile()
        for B in set(blocks)
    }
    done, kept, theta = s.num_warmup, [], []
    for B in tqdm(blocks, disable=not progress_bar, desc="tensor gibbs"):
        t0 = time.perf_counter()
        state, states, th = compiled[B](state, problem, test_index, jnp.asarray(done, jnp.int32))
        jax.block_until_ready(state)
        seconds.append((time.perf_counter() - t0) / (B * s.thinning))
        done += B * s.thinning
        kept.append(jax.tree.map(lambda x: np.swapaxes(np.asarray(x), 0, 1), states))
        theta.append(np.swapaxes(np.asarray(th, np.float64), 0, 1))
    rmse_draw = []
    if test is not None and theta:
        pred = info.shift.apply(np.concatenate(theta, axis=1))  # (C, S, P)
        y = np.asarray(test.values, np.float64)
        rmse_draw = [np.sqrt(np.mean((pred - y) ** 2, axis=-1))]
    return _result(info, train, kept, rmse_draw, seconds)


def fit_tensor_nuts(
    train: TensorData,
    info: FitInfo,
    test: TensorData | None,
    progress_bar: bool,
) -> "TensorFit":
    """NumPyro's NUTS on :func:`bmczoo.models.tensor_completion.tensor_completion` (small
    arrays), its draws as a :class:`TensorFit` (the discrete prior's ``gamma`` is the
    deterministic site of the marginal model: the posterior mean given the factors)."""
    from numpyro.infer import MCMC, NUTS

    from ...models.tensor_completion import tensor_completion

    s = info.settings
    mcmc = MCMC(
        NUTS(tensor_completion, target_accept_prob=s.target_accept_prob),
        num_warmup=s.num_warmup,
        num_samples=s.num_samples,
        thinning=s.thinning,
        num_chains=s.num_chains,
        chain_method="sequential",
        progress_bar=progress_bar,
    )
    t0 = time.perf_counter()
    mcmc.run(
        jax.random.key(info.seed),
        train,
        info.K,
        info.prior,
        likelihood=info.likelihood,
        biases=info.biases,
    )
    seconds = (time.perf_counter() - t0) / max(s.num_warmup + s.num_samples, 1)
    draws = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    return _from_draws(info, train, draws, test, (seconds,))


def fit_tensor_svi(
    train: TensorData,
    info: FitInfo,
    test: TensorData | None,
    progress_bar: bool,
) -> "TensorFit":
    """SVI (:class:`~bmczoo.inference.settings.SVI`: the settings' autoguide) or MAP
    (:class:`~bmczoo.inference.settings.MAP`: ``AutoDelta`` on the model with ``gamma``
    integrated out) on :func:`bmczoo.models.tensor_completion.tensor_completion`, by the
    matrix path's :func:`~bmczoo.inference.baselines.run_svi`; a :class:`TensorFit` of
    ``num_draws`` draws from the fitted guide (one chain), or of the MAP point (one draw).
    Where the guide has no ``gamma`` (the discrete prior, integrated out; every prior under
    MAP) each draw's ``gamma`` is its conditional given the factors (:func:`_gamma_given`)."""
    from ...models.tensor_completion import tensor_completion
    from ..baselines import run_svi

    s = info.settings
    guide = "delta" if isinstance(s, st.MAP) else s.guide
    t0 = time.perf_counter()
    draws, _, losses, _ = run_svi(
        train, info, s, guide, progress_bar=progress_bar, model=tensor_completion
    )
    seconds = (time.perf_counter() - t0) / s.num_steps
    draws = {k: np.asarray(v)[None] for k, v in draws.items()}  # one chain
    if "gamma" not in draws:
        U = [draws[f"U{d}"] for d in range(train.ndim)]
        draws["gamma"] = _gamma_given(info.prior, U)
    fit = _from_draws(info, train, draws, test, (seconds,))
    fit.losses = np.asarray(losses)
    return fit


def _gamma_given(prior, U: list) -> np.ndarray:
    """``gamma`` given the factors ``U`` (each (..., m_d, K)): the discrete prior's
    posterior mean (the NumPyro model's deterministic ``gamma``), else ``1 / E[1/gamma |
    U]`` (the prior's conditional, :meth:`~bmczoo.priors.Prior.vb_update`; the fixed
    prior's ``gamma``)."""
    from ...priors import Discrete

    S = sum(np.sum(np.asarray(u, np.float64) ** 2, axis=-2) for u in U)
    n = sum(np.shape(u)[-2] for u in U)
    if isinstance(prior, Discrete):
        q = 1.0 / (1.0 + np.exp(-np.asarray(prior.slab_logit(S, n))))
        return q * prior.C + (1.0 - q) * prior.eps
    return 1.0 / np.asarray(prior.vb_update(jnp.asarray(S), n).inv_mean, np.float64)


def _from_draws(info, train, draws: dict, test, seconds: tuple) -> "TensorFit":
    """The fit from the NumPyro model's draws (chain, draw, ...) and its test RMSE per draw."""
    D = train.ndim
    factors = {f"U{d}": draws[f"U{d}"] for d in range(D)}
    samples = {"gamma": draws["gamma"]}
    if "tau" in draws:
        samples["tau"] = draws["tau"]
    if info.biases is not None:
        factors.update({f"b{d}": draws[f"bias{d}"] for d in range(D)})
        samples["bias_var"] = np.stack([draws[f"bias{d}_var"] for d in range(D)], axis=-1)
    fit = TensorFit(
        info=info,
        samples=samples,
        factors=factors,
        modes=tuple(train.modes),
        sweep_seconds=tuple(seconds),
    )
    if test is not None:
        C, S = np.shape(factors["U0"])[:2]
        theta = np.concatenate([t for _, _, t in fit._theta_blocks(test.indices)], axis=1)
        pred = info.shift.apply(theta.reshape(C, S, -1))
        y = np.asarray(test.values, np.float64)
        fit.rmse_draw = np.sqrt(np.mean((pred - y) ** 2, axis=-1))
    return fit


def _result(info, train, kept, rmse_draw, seconds) -> "TensorFit":
    """The fit from the blocks of kept states (each (C, B, ...))."""
    stack = lambda xs: np.concatenate(xs, axis=1)  # noqa: E731 - (C, S, ...)
    factors = {f"U{d}": stack([k.U[d] for k in kept]) for d in range(train.ndim)}
    if kept[0].rows:  # Normal-Wishart rows: each mode's (mu, Lambda)
        samples = {}
        for d in range(train.ndim):
            samples[f"mu{d}"] = stack([k.rows[d][0] for k in kept])
            samples[f"Lambda{d}"] = stack([k.rows[d][1] for k in kept])
    else:
        samples = {"gamma": stack([k.gamma for k in kept])}
    if info.likelihood.learned:
        samples["tau"] = stack([k.tau for k in kept])
    if info.biases is not None:
        factors.update({f"b{d}": stack([k.bias[d] for k in kept]) for d in range(train.ndim)})
        samples["bias_var"] = stack([k.bias_var for k in kept])
    return TensorFit(
        info=info,
        samples=samples,
        factors=factors,
        modes=tuple(train.modes),
        rmse_draw=np.concatenate(rmse_draw, axis=1) if rmse_draw else np.zeros((0, 0)),
        sweep_seconds=tuple(seconds),
    )


@saving.result_class
@dataclasses.dataclass(repr=False)
class TensorFit:
    """Result of ``bmc.fit`` on a :class:`~bmczoo.data.TensorData` (the CP model: Gibbs,
    VB, NUTS, SVI or MAP).

    Attributes
    ----------
    info : the fit's :class:`~bmczoo.inference.info.FitInfo` (``shape`` the array's).
    samples : kept draws (chain, draw, ...): ``gamma`` (K,) (column-scale priors),
        ``mu0``, ``Lambda0``, ... (Normal-Wishart rows: each mode's), ``tau`` (learned
        noise), ``bias_var`` (D,) (biases).
    factors : kept draws of the factors ``U0``... (chain, draw, m_d, K) and the biases
        ``b0``... (chain, draw, m_d).
    modes : the modes' names.
    rmse_draw : (chain, kept draw) RMSE of each kept draw's theta at the test entries
        (empty without test data).
    sweep_seconds : wall seconds of the warm-up (its compilation included), then the
        seconds per sweep of each block of kept draws (compiled beforehand); NUTS: the
        seconds per iteration; SVI and MAP: the seconds per optimisation step.
    losses : SVI and MAP: the loss of each step (the negative ELBO; MAP: the negative log
        joint); VB: the negative ELBO of each iteration (the kept run); empty for MCMC.
    seen_index : (n, D) the training entries (the pattern ``recommend(exclude_seen=True)``
        leaves out; saved with the fit), or None.
    q : VB: the parameters of ``q(gamma)`` (``gamma/inv_mean``, ``gamma/slab_prob``, ...,
        those of the prior's :meth:`~bmczoo.priors.Prior.vb_params`) and of a learned
        ``q(tau)`` (``tau/shape``, ``tau/rate``); empty for the other methods.
    """

    info: Any = None
    samples: dict = dataclasses.field(default_factory=dict)
    factors: dict = dataclasses.field(default_factory=dict)
    modes: tuple = ()
    rmse_draw: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0)))
    sweep_seconds: tuple = ()
    losses: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    seen_index: np.ndarray | None = None
    q: dict = dataclasses.field(default_factory=dict)
    has_q: ClassVar[bool] = False

    # ------------------------------------------------------------------ saving (hooks)
    def _saved_fields(self, factor_limit) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def _state_arrays(self) -> dict:
        return {}

    @classmethod
    def _state_from_arrays(cls, arrays: dict) -> dict:
        return {}

    def save(self, path, *, overwrite: bool = False) -> None:
        """Write the fit to ``path`` (``.npz``; :func:`bmczoo.load` reads it back).

        Parameters
        ----------
        path : str or os.PathLike
            The file.
        overwrite : bool
            Replace an existing file.
        """
        saving.save(self, path, overwrite=overwrite, _stacklevel=3)

    def __repr__(self) -> str:
        C, S = np.shape(self.factors["U0"])[:2]
        dims = " x ".join(str(m) for m in self.shape)
        how = "" if self.info.method == "gibbs" else f" ({self.info.method})"
        return (
            f"<TensorFit{how}: {self.info.prior.name} prior, K={self.info.K}, a {dims} array, "
            f"{C} chain{'s' if C != 1 else ''} x {S} draws>"
        )

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return tuple(self.info.shape)

    # ------------------------------------------------------------------ draws
    def _check_indices(self, *index) -> np.ndarray:
        dummy = TensorData(
            np.zeros((1, len(self.shape)), np.int32), [0.0], self.shape, modes=self.modes
        )
        return dummy.check_entries(*index)

    def _theta_blocks(self, idx: np.ndarray):
        """``(p0, p1, theta (S, p1 - p0))`` over blocks of the entries: each kept draw's
        theta (centred scale, biases included), float64."""
        U = [np.asarray(self.factors[f"U{d}"], np.float64) for d in range(len(self.shape))]
        C, S = U[0].shape[:2]
        U = [u.reshape(C * S, *u.shape[2:]) for u in U]
        bias = [
            np.asarray(self.factors[f"b{d}"], np.float64).reshape(C * S, -1)
            for d in range(len(self.shape))
            if f"b{d}" in self.factors
        ]
        step = max(1, _BLOCK // max(C * S * self.info.K, 1))
        for p0 in range(0, idx.shape[0], step):
            sub = idx[p0 : p0 + step]
            t = np.ones((C * S, sub.shape[0], self.info.K))
            for d, u in enumerate(U):
                t = t * u[:, sub[:, d]]
            t = t.sum(-1)
            for d, b in enumerate(bias):
                t = t + b[:, sub[:, d]]
            yield p0, p0 + sub.shape[0], t

    def _moments(self, idx) -> tuple[np.ndarray, np.ndarray]:
        mean, var = np.zeros(idx.shape[0]), np.zeros(idx.shape[0])
        for p0, p1, t in self._theta_blocks(idx):
            mean[p0:p1], var[p0:p1] = t.mean(0), t.var(0)
        return mean, var

    def noise_var(self) -> float:
        """``E[1/tau]`` over the draws of a learned noise, else the fixed ``1/tau``."""
        if "tau" in self.samples:
            return float(np.mean(1.0 / np.asarray(self.samples["tau"], np.float64)))
        return 1.0 / float(self.info.tau)

    # ------------------------------------------------------------------ outputs
    def predict(self, *index, return_std: bool = False):
        """Posterior mean of the entries on the data scale (the centring offset added,
        clipped when the fit clips); with ``return_std`` also the predictive sd
        ``sqrt(Var[theta] + E[1/tau])``.

        Parameters
        ----------
        *index : array_like of int
            One index array (P,) per mode (``predict(users, items, times)``), or one
            (P, D) array.
        return_std : bool
            Also return the predictive sd.
        """
        idx = self._check_indices(*index)
        mean, var = self._moments(idx)
        out = self.info.shift.apply(mean)
        return (out, np.sqrt(var + self.noise_var())) if return_std else out

    def predictive_interval(self, *index, prob: float = 0.9):
        """Central ``prob`` interval of the Gaussian with the predictive mean and sd
        (unclipped).

        Parameters
        ----------
        *index : array_like of int
            One index array (P,) per mode, or one (P, D) array.
        prob : float
            The interval's probability, in (0, 1).
        """
        from statistics import NormalDist

        if not (0.0 < float(prob) < 1.0):
            raise ValueError(f"prob must be in (0, 1), got {prob!r}")
        idx = self._check_indices(*index)
        mean, var = self._moments(idx)
        sd = np.sqrt(var + self.noise_var())
        z = NormalDist().inv_cdf(0.5 + 0.5 * float(prob))
        mean = mean + self.info.shift.offset
        return mean - z * sd, mean + z * sd

    def _check_test(self, test) -> TensorData:
        if not isinstance(test, TensorData):
            raise TypeError(f"test must be a TensorData, got {type(test).__name__}")
        if tuple(test.shape) != self.shape:
            raise ValueError(f"test has shape {test.shape}, the fit has {self.shape}")
        return test

    def rmse(self, test: TensorData) -> float:
        """RMSE of :meth:`predict` at the entries of ``test``.

        Parameters
        ----------
        test : TensorData
            Held-out entries of the fit's shape.
        """
        test = self._check_test(test)
        pred = self.predict(test.indices)
        return float(np.sqrt(np.mean((pred - np.asarray(test.values, np.float64)) ** 2)))

    def log_predictive_density(self, test: TensorData) -> float:
        """Mean over ``test`` of ``log mean_s N(y | theta_s + offset, 1/tau_s)`` (the
        mixture over the kept draws).

        Parameters
        ----------
        test : TensorData
            Held-out entries of the fit's shape.
        """
        from scipy.special import logsumexp

        test = self._check_test(test)
        y = np.asarray(test.values, np.float64) - self.info.shift.offset
        if "tau" in self.samples:
            tau = np.asarray(self.samples["tau"], np.float64).reshape(-1, 1)
        else:
            tau = np.full((1, 1), float(self.info.tau))
        out = np.zeros(test.n)
        for p0, p1, t in self._theta_blocks(test.indices):
            lp = 0.5 * (np.log(tau) - math.log(2 * math.pi)) - 0.5 * tau * (y[None, p0:p1] - t) ** 2
            out[p0:p1] = logsumexp(lp, axis=0) - math.log(t.shape[0])
        return float(np.mean(out))

    def recommend(
        self,
        users,
        context,
        n: int = 10,
        exclude_seen: bool | str = True,
        by: str = "mean",
        *,
        prob: float = 0.9,
        seed: int | None = None,
        seen: TensorData | None = None,
        batch_size: int | None = None,
    ):
        """The top ``n`` items (the second mode) of each user (the first mode) at a
        context (the indices of the other modes, e.g. a time bin): ``(items, scores)``,
        each (len(users), n), best first.

        Users are scored ``batch_size`` at a time from the factors' kept draws (a (batch,
        m_item) block of scores; nothing of the array's size).  Scores are on the data
        scale (offset added), never clipped; where fewer than ``n`` items remain after the
        exclusion, the missing places hold item ``-1`` and score ``-inf``.

        Parameters
        ----------
        users : array_like of int
            1-D indices along the first mode.
        context : int or array_like of int
            The indices of the modes after the first two: an int (a 3-way array) or
            ``D - 2`` ints, the same for every user; or a (len(users), D - 2) array, one
            context per user.
        n : int
            Items per user, ``1 <= n <= m_item``.
        exclude_seen : bool or {"any", "context"}
            ``True`` (or ``"any"``): leave out the items the user rated in training at
            any context (a film seen last year is not recommended again);
            ``"context"``: only those rated at the given context; ``False``: none.
        by : {"mean", "upper", "thompson"}
            The posterior mean of ``theta``; the upper end of its central ``prob``
            predictive interval (mean + z sd, the draws' variance plus the noise's); one
            posterior draw per user (needs ``seed``).
        prob : float
            ``by="upper"``: the interval's probability, in (0, 1).
        seed : int, optional
            ``by="thompson"``: the seed of the draws (one per user, drawn at once, so the
            result does not depend on ``batch_size``).
        seen : TensorData, optional
            The entries ``exclude_seen`` leaves out (default: the training entries the
            fit holds, saved with it).
        batch_size : int, optional
            Users scored at a time (default: about 2^22 numbers per block).
        """
        from .recommend import recommend

        return recommend(
            self,
            users,
            context,
            n,
            exclude_seen,
            by,
            prob=prob,
            seed=seed,
            seen=seen,
            batch_size=batch_size,
        )

    # ------------------------------------------------------------------ rank
    def active_threshold(self) -> float:
        """The threshold on ``gamma_h`` of an active column: the prior's, else 1% of the
        largest posterior mean of ``gamma``."""
        t = self.info.prior.active_threshold()
        if t is not None:
            return float(t)
        return 0.01 * float(np.max(np.mean(self.samples["gamma"], axis=(0, 1))))

    def num_active(self) -> np.ndarray:
        """The number of active columns (the CP rank) of each kept draw (chain, draw)."""
        if "gamma" not in self.samples:
            raise ValueError(
                f"the {self.info.prior.name} prior has no column scales: no CP rank posterior"
            )
        return np.sum(np.asarray(self.samples["gamma"]) > self.active_threshold(), axis=-1)

    def rank_posterior(self) -> dict[int, float]:
        """The posterior probability of each CP rank (over every kept draw; VB: exactly
        under ``q(gamma)``, the columns independent with ``q(gamma_h > threshold)`` from the
        prior's :meth:`~bmczoo.priors.Prior.q_prob_above`, e.g. the discrete prior's
        ``q(gamma_h = C)``)."""
        params = {k[6:]: v for k, v in self.q.items() if k.startswith("gamma/")}
        if params:
            p = np.asarray(self.info.prior.q_prob_above(params, self.active_threshold()))
            dist = np.ones(1)  # the Poisson-binomial law of the number of active columns
            for ph in np.asarray(p, np.float64).reshape(-1):
                dist = np.append(dist * (1.0 - ph), 0.0) + np.append(0.0, dist * ph)
            return {r: float(v) for r, v in enumerate(dist) if v > 0.0}
        r, c = np.unique(self.num_active(), return_counts=True)
        return {int(k): float(v) / float(c.sum()) for k, v in zip(r, c)}

    # ------------------------------------------------------------------ ArviZ
    def to_arviz(self):
        """The kept draws as ArviZ data (``InferenceData``, or a ``DataTree`` with ArviZ
        1.x): ``gamma``, ``num_active``, ``tau`` (learned noise; and ``noise_sd``) and
        ``bias_var``, and the per-draw test RMSE in ``sample_stats``."""
        dims = {"gamma": ("h",), "bias_var": ("mode",)}
        if "gamma" in self.samples:
            post = {"gamma": np.asarray(self.samples["gamma"]), "num_active": self.num_active()}
        else:  # Normal-Wishart rows: each mode's mean
            post = {f"mu{d}": np.asarray(self.samples[f"mu{d}"]) for d in range(len(self.shape))}
            dims.update({f"mu{d}": ("h",) for d in range(len(self.shape))})
        if "tau" in self.samples:
            post["tau"] = np.asarray(self.samples["tau"])
            post["noise_sd"] = 1.0 / np.sqrt(post["tau"])
        if "bias_var" in self.samples:
            post["bias_var"] = np.asarray(self.samples["bias_var"])
        groups = {"posterior": post}
        if np.size(self.rmse_draw):
            groups["sample_stats"] = {"rmse": np.asarray(self.rmse_draw)}
        if np.size(self.losses):
            groups["convergence"] = {"loss": np.asarray(self.losses, np.float64)[None]}
        fa = FitArrays(
            groups=groups,
            dims=dims,
            coords={"h": ("h", np.arange(self.info.K)), "mode": ("mode", list(self.modes))},
            attrs={
                "method": self.info.method,
                "model": "cp",
                "prior": self.info.prior.name,
                "K": int(self.info.K),
                "shape": list(self.shape),
            },
        )
        return arrays_to_arviz(fa)


def check_tensor_settings(settings, method_kwargs: dict) -> None:
    """A clear error for what the tensor sampler does not implement yet."""
    if isinstance(settings, (st.NUTS, st.SVI, st.MAP)):
        return
    if isinstance(settings, st.VB):
        if settings.devices is not None or settings.checkpoint is not None:
            what = "devices" if settings.devices is not None else "checkpoint"
            raise ValueError(f"{what}= is not implemented for method='vb' on a TensorData yet")
        return
    if not isinstance(settings, st.Gibbs):
        raise ValueError(
            f"a TensorData is fitted by method='gibbs', 'vb', 'nuts', 'svi' and 'map' only "
            f"for now, not {settings.method!r}"
        )
    allowed = {"num_warmup", "num_samples", "thinning", "num_chains", "column_moves", "init_gamma"}
    extra = sorted(set(method_kwargs) - allowed)
    if extra or settings.devices is not None or settings.checkpoint is not None:
        what = extra[0] if extra else ("devices" if settings.devices is not None else "checkpoint")
        raise ValueError(f"{what}= is not implemented for a TensorData (the CP sampler) yet")
