"""The checks of the inference settings' values (:mod:`bmczoo.inference.settings`), each
error a :class:`~bmczoo.inference.errors.SettingsError` naming ``bmc.fit``'s argument."""

from __future__ import annotations

import numbers

import numpy as np

from .._checks import check_int, check_path, check_real
from .._checks import check_choice
from .errors import SettingsTypeError, SettingsValueError
from .errors import checked as _checked
from .errors import literal as _literal


def int_setting(param: str, value, minimum: int, label: str | None = None) -> int:
    """``value`` as an int >= ``minimum`` (:func:`bmczoo._checks.check_int`)."""
    what = {0: "a non-negative integer", 1: "a positive integer"}.get(
        minimum, f"an integer >= {minimum}"
    )
    return _checked(check_int, param, value, f"must be {what}", label=label, minimum=minimum)


def choice_setting(param: str, value, choices) -> str:
    """``value`` as one of ``choices`` (:func:`bmczoo._checks.check_choice`)."""
    what = f"must be one of {tuple(choices)}"
    return _checked(check_choice, param, value, what, choices, type_reason=f"{what} (a string)")


def real_setting(param: str, value, what: str, **bounds) -> float:
    """``value`` as a finite float within ``bounds`` (:func:`bmczoo._checks.check_real`,
    whose ``what`` for those bounds is given: ``"finite and >= 0"``)."""
    return _checked(
        check_real,
        param,
        value,
        f"must be {what}",
        type_reason=f"must be a real number, {what}",
        **bounds,
    )


def check_overrelax(rho) -> float:
    """``rho`` as a float in (-1, 1), else an error naming ``overrelax``."""
    if isinstance(rho, (bool, np.bool_)) or not isinstance(
        rho, (numbers.Real, np.floating, np.integer)
    ):
        raise SettingsTypeError("overrelax", rho, "must be a number in (-1, 1)")
    rho = float(rho)
    if not -1.0 < rho < 1.0:
        raise SettingsValueError("overrelax", rho, "must be in (-1, 1) (0: plain Gibbs)")
    return rho


def check_init_gamma(value):
    if value is None:
        return None
    try:
        g = np.asarray(value, np.float64)
    except (ValueError, TypeError):
        raise SettingsTypeError(
            "init_gamma", value, "must be a positive number or an array of them"
        ) from None
    if g.ndim > 1 or not np.all(np.isfinite(g) & (g > 0)):
        raise SettingsValueError("init_gamma", value, "must be finite and > 0")
    return float(g) if g.ndim == 0 else tuple(float(x) for x in g)


def check_track(track):
    if isinstance(track, (numbers.Integral, np.integer)) and not isinstance(
        track, (bool, np.bool_)
    ):
        if track < 0:
            raise SettingsValueError("track", track, "must be >= 0 or (rows, cols)")
        return int(track)
    if not (isinstance(track, (tuple, list)) and len(track) == 2):
        raise SettingsTypeError(
            "track", track, "must be a number of entries or a pair (rows, cols)"
        )
    return (np.asarray(track[0]), np.asarray(track[1]))


def check_mcmc(s) -> None:
    int_setting("num_warmup", s.num_warmup, 0)
    int_setting("num_samples", s.num_samples, 1)
    int_setting("thinning", s.thinning, 1)
    int_setting("num_chains", s.num_chains, 1)
    if s.thinning > s.num_samples:
        raise SettingsValueError(
            "thinning",
            s.thinning,
            "{thinning} > {num_samples} keeps no draw",
            others={"num_samples": s.num_samples},
        )


def check_checkpoint(s) -> None:
    if s.checkpoint is not None:
        _checked(check_path, "checkpoint", s.checkpoint, "must be a file path")
    int_setting("checkpoint_every", s.checkpoint_every, 1)


def mesh_of(devices):
    if devices is None:
        return None
    from .sharding import make_mesh

    return make_mesh(devices)


def check_column_moves(value) -> bool | None:
    """``column_moves``: True, False or None (the moves where the prior has one)."""
    if value is not None and not isinstance(value, (bool, np.bool_)):
        raise SettingsTypeError(
            "column_moves", value, "must be True, False or None (on where the prior has a move)"
        )
    return None if value is None else bool(value)


def check_anneal(steps, every) -> tuple[int, int]:
    """``anneal_steps`` (an int >= 0; 0: no annealed switch) and ``anneal_every`` (an int
    >= 1), else an error naming the argument."""
    return int_setting("anneal_steps", steps, 0), int_setting("anneal_every", every, 1)


def check_spike_and_slab(prior, steps: int | None = None) -> None:
    """Raise unless ``prior``'s column scales have a slab to switch with
    (:meth:`~bmczoo.priors.Prior.column_block`): what the annealed switch needs
    (``anneal_steps``, ``steps`` where known)."""
    import jax.numpy as jnp

    if not (prior.has_column_move and prior.column_block(jnp.ones(1)) is not None):
        name = _literal(prior.name or type(prior).__name__)
        raise SettingsValueError(
            "anneal_steps",
            steps,
            f"the {name} prior has no spike and slab to switch between "
            "({names[anneal_steps]} > 0 needs the discrete prior)",
            others={},
        )


def check_column_moves_every(value) -> int | None:
    """``column_moves_every``: the column moves run every that many sweeps (an int >= 1;
    None: the prior's :attr:`~bmczoo.priors.Prior.column_moves_every`)."""
    return None if value is None else int_setting("column_moves_every", value, 1)


def resolve_column_moves(value, prior) -> bool:
    """``column_moves`` for ``prior``: None means where the prior has a column move."""
    return bool(prior.has_column_move) if value is None else bool(value)


def resolve_column_moves_every(value, prior) -> int:
    """``column_moves_every`` for ``prior``: None means the prior's own schedule (1 without
    a prior)."""
    if value is not None:
        return value
    return 1 if prior is None else int(prior.column_moves_every)
