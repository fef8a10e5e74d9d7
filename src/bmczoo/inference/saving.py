"""Saved fits without pickle: ``fit.save(path)`` and ``bmc.load(path)``.

The file is an ``.npz`` (``np.load(..., allow_pickle=False)`` reads it) holding

* ``__format__``: the format string ``bmczoo-fit-<version>`` (this version: 1);
* ``__meta__``: JSON metadata: the result class, the method, the model's components as
  their descriptions (prior name and hyper-parameters, likelihood, biases), ``K``, the
  shape, the shift (offset, clip range), the settings, ``tau``, and the result's scalar
  fields;
* every array field of the result under ``f/<name>`` (``f/<name>/<key>`` for a dict of
  arrays: MCMC ``samples``, SVI ``draws`` and ``point``, the VB q parameters), and for a
  VB fit its :class:`~bmczoo.inference.vb.VBState` (the full covariances) under
  ``vb/...``.

Arrays keep their dtype, so the loaded fit's ``predict`` (also ``return_std=True``),
``predictive_interval``, ``recommend`` and ``fold_in`` equal the original's bit for bit,
without the data.  Not saved: NumPyro's ``MCMC`` object (``fit.mcmc``) and an SVI
guide (``fit.guide``): they are None after loading.
"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np

__all__ = ["save", "load", "load_extra", "FORMAT", "VERSION"]

VERSION = 1
FORMAT = f"bmczoo-fit-{VERSION}"
_SKIP = {"info", "mcmc", "guide", "state", "seen_values"}  # the training ratings are not saved


def _json_default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, tuple):
        return list(x)
    return str(x)


def _classes():
    from . import results

    return {c.__name__: c for c in (results.GibbsFit, results.NUTSFit, results.VBFit, results.SVIFit,
                                     results.MAPFit, results.MCMCFit)}


def save(fit, path, *, extra: dict | None = None) -> None:
    """Write ``fit`` to ``path`` (see the module docstring).  ``extra``: arrays stored
    beside the fit under ``x/<name>`` (e.g. the command line's dataset ids), read back by
    :func:`load_extra`; :func:`load` ignores them."""
    from .results import _NoGamma

    if type(fit).__name__ not in _classes():
        raise TypeError(f"cannot save a {type(fit).__name__}")
    info = fit.info
    arrays: dict[str, np.ndarray] = {}
    fields: dict = {}
    kinds: dict = {}
    for f in dataclasses.fields(fit):
        name = f.name
        if name in _SKIP:
            continue
        v = getattr(fit, name)
        if v is None:
            kinds[name] = "none"
        elif isinstance(v, _NoGamma):
            kinds[name] = "no_gamma"
        elif isinstance(v, dict):
            kinds[name] = "dict"
            for k, x in v.items():
                arrays[f"f/{name}/{k}"] = np.asarray(x)
        elif isinstance(v, np.ndarray) or hasattr(v, "__array__") and not isinstance(v, (int, float, bool)):
            kinds[name] = "array"
            arrays[f"f/{name}"] = np.asarray(v)
        elif isinstance(v, tuple):
            kinds[name] = "tuple"
            fields[name] = list(v)
        else:
            kinds[name] = "scalar"
            fields[name] = v
    if getattr(fit, "state", None) is not None and type(fit).__name__ == "VBFit":
        from .vb_driver import _state_arrays

        arrays.update({"vb/" + k[len("state/"):]: v for k, v in _state_arrays(fit.state).items()})
        kinds["state"] = "vbstate"
    meta = {
        "format": FORMAT, "class": type(fit).__name__, "method": info.method,
        "prior": {"name": info.prior.name, "hyperparameters": info.prior.hyperparameters()},
        "likelihood": info.likelihood.describe(),
        "biases": None if info.biases is None else info.biases.describe(),
        "K": int(info.K), "shape": [int(x) for x in info.shape],
        "shift": {"offset": float(info.shift.offset), "lo": float(info.shift.lo), "hi": float(info.shift.hi)},
        "center": bool(info.center), "seed": int(info.seed), "dtype": info.dtype, "tau": float(info.tau),
        "settings": info.settings.as_dict(), "fields": fields, "kinds": kinds,
    }
    for k, v in (extra or {}).items():
        arrays[f"x/{k}"] = np.asarray(v)
    from .checkpoint import write_npz_atomic

    write_npz_atomic(path, __format__=np.asarray(FORMAT),
                     __meta__=np.asarray(json.dumps(meta, default=_json_default)), **arrays)


def _settings(method: str, d: dict):
    from .settings import SETTINGS

    cls = SETTINGS[method]
    kw = {k: v for k, v in d.items() if k in cls.argument_names() and k not in ("devices", "checkpoint", "track")}
    for k, v in kw.items():
        if isinstance(v, list):
            kw[k] = tuple(v)
    try:
        return cls(**kw)
    except Exception:  # settings of another version: the defaults (only metadata)
        return cls()


def load(path):
    """Read a fit written by ``fit.save`` (``ValueError`` for another kind of file or a
    newer format)."""
    from ..likelihoods import get_likelihood
    from ..offsets import Biases, Shift
    from ..priors import get_prior
    from . import vb
    from .results import FitInfo, no_gamma

    try:
        with np.load(path, allow_pickle=False) as f:
            data = {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"{str(path)!r} is not a saved bmczoo fit (not a readable .npz file: {err})") from None
    found = str(data.pop("__format__", ""))
    m = re.fullmatch(r"bmczoo-fit-(\d+)", found)
    if m is None:
        raise ValueError(f"{str(path)!r} is not a saved bmczoo fit (no {FORMAT!r} format string)")
    if int(m.group(1)) > VERSION:
        raise ValueError(f"{str(path)!r} was saved in format {found}, newer than this bmczoo reads ({FORMAT}): "
                         "upgrade bmczoo")
    meta = json.loads(str(data.pop("__meta__")))
    lik = dict(meta["likelihood"])
    prior = get_prior(meta["prior"]["name"], **meta["prior"]["hyperparameters"])
    likelihood = get_likelihood(lik.pop("name"), **lik)
    biases = None
    if meta["biases"] is not None:
        b = dict(meta["biases"])
        b.pop("name", None)
        biases = Biases(**b)
    sh = meta["shift"]
    info = FitInfo(method=meta["method"], prior=prior, likelihood=likelihood, K=int(meta["K"]),
                   shape=tuple(meta["shape"]), shift=Shift(sh["offset"], sh["lo"], sh["hi"]), center=meta["center"],
                   seed=meta["seed"], dtype=meta["dtype"], settings=_settings(meta["method"], meta["settings"]),
                   tau=meta["tau"], biases=biases)
    cls = _classes()[meta["class"]]
    kw = {}
    for name, kind in meta["kinds"].items():
        if kind == "none":
            kw[name] = None
        elif kind == "no_gamma":
            kw[name] = no_gamma(prior)
        elif kind == "dict":
            pre = f"f/{name}/"
            kw[name] = {k[len(pre):]: v for k, v in data.items() if k.startswith(pre)}
        elif kind == "array":
            kw[name] = data[f"f/{name}"]
        elif kind == "tuple":
            kw[name] = tuple(meta["fields"][name])
        elif kind == "scalar":
            kw[name] = meta["fields"][name]
        elif kind == "vbstate":
            kw["state"] = _vb_state({k[3:]: v for k, v in data.items() if k.startswith("vb/")}, vb.VBState)
    return cls(info=info, **kw)


def load_extra(path) -> dict:
    """The ``extra`` arrays saved with a fit (``{}`` when there are none)."""
    with np.load(path, allow_pickle=False) as f:
        return {k[2:]: f[k] for k in f.files if k.startswith("x/")}


def _vb_state(arrays: dict, VBState):
    fields = {}
    for f in VBState._fields:
        if f in arrays:
            fields[f] = arrays[f]
        else:
            pre = f + "/"
            sub = {k[len(pre):]: v for k, v in arrays.items() if k.startswith(pre)}
            if f in ("prior", "noise", "bias"):
                fields[f] = sub
            else:
                fields[f] = None
    return VBState(**fields)
