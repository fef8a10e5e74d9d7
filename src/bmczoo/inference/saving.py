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
  ``vb/...``;
* a prior's feature links (Normal-Wishart ``row_features=``, ``col_features=``,
  ``implicit=``) in the metadata (``True``: the data's tables, the ``implicit`` flag as
  given), and a :class:`~bmczoo.data.Features` table given to the prior under
  ``p/<row_features|col_features>/<indptr|indices|values|names|groups>``: the loaded
  fit's prior has the same links (its ``str`` is the original's; with ``True`` it is
  equal to the original).

The file is written with ``np.savez_compressed`` (an uncompressed ``.npz`` of the same
format loads the same), and every array keeps its dtype: a float32 fit is stored in
float32.  It is written atomically (a temporary file beside it, renamed into place) and
replaces an existing file only with ``overwrite=True``, as the command line's ``--save``
only with ``--overwrite``.

Factor draws of an MCMC fit (``M``, ``N``, ``row_bias``, ``col_bias`` of every kept draw)
are the bulk of a fit.  By default (``factor_draws="auto"``) ``save`` keeps every draw, so
that the loaded fit's ``predict`` (also ``return_std=True``), ``predictive_interval``,
``predict_proba``, ``log_predictive_density``, ``recommend`` and ``fold_in`` equal the
original's bit for bit, at every entry; only when the factor draws take more than
:data:`FACTOR_BYTES_LIMIT` (1 GiB, uncompressed) does it keep fewer, as many as fit under
the limit, and warn (:class:`FactorDrawsThinnedWarning`).  ``factor_draws=n`` keeps at
most ``n`` in all chains pooled and ``factor_draws="all"`` every draw, whatever their size.

Thinned, each chain keeps ``max(1, n // chains)`` draws, evenly spaced over its kept draws
(first and last included), with every other per-draw site at the same draws, as the fit's
``factor_samples``; ``samples`` keeps every draw of the small sites (gamma, tau, tracked
theta, the prior's variables) and gains ``theta_sv``, the singular values of theta of every
draw, so that the diagnostics (``to_arviz``, ``summary``, ``rank_posterior``) of the loaded
fit are those of the original.  The moments accumulated during the fit (the test set,
``predict=``) are saved as they are, so ``predict``, ``return_std`` and
``predictive_interval`` at those entries stay exact; the quantities computed from the
factor draws (predictions at other entries, ``log_predictive_density``, ``recommend``,
``fold_in``) then average over the kept draws only: a Monte Carlo estimate from fewer
draws.  VB, SVI and MAP fits are always saved whole.  Not saved: NumPyro's ``MCMC`` object
(``fit.mcmc``) and an SVI guide (``fit.guide``): they are None after loading.
"""

from __future__ import annotations

import errno
import json
import os
import re
import warnings
from pathlib import Path

import numpy as np

from .checkpoint import write_npz_atomic
from .info import FitInfo, _NoGamma, no_gamma

__all__ = [
    "save",
    "load",
    "load_extra",
    "FORMAT",
    "VERSION",
    "FACTOR_BYTES_LIMIT",
    "FactorDrawsThinnedWarning",
]

#: Bytes (uncompressed) of an MCMC fit's factor draws above which ``save`` with the
#: default ``factor_draws="auto"`` keeps fewer draws (and warns): 1 GiB.  Below it every
#: draw is kept, so that the loaded fit predicts exactly what the fit predicts; the bound
#: keeps a fit run with ``store_factors=True`` on a large matrix from writing a file of
#: many gigabytes unasked.
FACTOR_BYTES_LIMIT = 1 << 30
#: the per-draw sites thinned by ``save`` (those with a row or column axis)
FACTOR_SITES = ("M", "N", "row_bias", "col_bias")


class FactorDrawsThinnedWarning(UserWarning):
    """``save`` kept fewer factor draws than the fit holds (their size is above
    :data:`FACTOR_BYTES_LIMIT`): the loaded fit's outputs computed from the factor draws
    differ from the fit's."""


VERSION = 1
FORMAT = f"bmczoo-fit-{VERSION}"
_SKIP = {
    "info",
    "mcmc",
    "guide",
    "state",
    "seen_values",
    "seen_context",
}  # the training ratings are not saved


def _json_default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, tuple):
        return list(x)
    return str(x)


#: the result classes a file can hold, by name (:func:`result_class` adds them)
_CLASSES: dict[str, type] = {}


def result_class(cls: type) -> type:
    """Class decorator: ``cls`` can be saved and loaded by its name.  Its fields are
    written by kind (arrays, dicts of arrays, scalars, tuples); its ``_state_arrays()``
    (``state/...`` arrays) beside them, given back to its ``_state_from_arrays`` on load."""
    _CLASSES[cls.__name__] = cls
    return cls


def _check_factor_draws(factor_draws) -> int | str | None:
    """``factor_draws`` as a bound (None: keep all; ``"auto"``: all unless above
    :data:`FACTOR_BYTES_LIMIT`)."""
    if factor_draws is None:
        return "auto"
    if isinstance(factor_draws, str):
        if factor_draws not in ("all", "auto"):
            raise ValueError(
                f"factor_draws must be a positive integer, 'auto' or 'all', got {factor_draws!r}"
            )
        return None if factor_draws == "all" else "auto"
    from .._checks import check_int

    return check_int("factor_draws", factor_draws, minimum=1)


def _factor_source(fit) -> dict | None:
    """The per-draw sites, with leading (chain, draw) axes, in which an MCMC fit holds
    its factor draws (None when it holds none: other families, ``store_factors=False``)."""
    src = getattr(fit, "factor_samples", None)
    if src is None:
        src = getattr(fit, "samples", None)
    if not isinstance(src, dict) or "M" not in src or np.ndim(src["M"]) < 4:
        return None
    return src


def factor_draw_bytes(fit) -> int:
    """Bytes (uncompressed, in the fit's dtype) of the factor draws an MCMC fit holds
    (:data:`FACTOR_SITES`; 0 without factor draws)."""
    src = _factor_source(fit)
    if src is None:
        return 0
    return sum(
        int(np.size(src[k])) * np.dtype(src[k].dtype).itemsize for k in FACTOR_SITES if k in src
    )


def _auto_factor_limit(fit, stacklevel: int) -> int | None:
    """The bound of ``factor_draws="auto"``: None (every draw) while the factor draws take
    at most :data:`FACTOR_BYTES_LIMIT`, else as many draws as fit under it, with a
    :class:`FactorDrawsThinnedWarning`."""
    nbytes = factor_draw_bytes(fit)
    if nbytes <= FACTOR_BYTES_LIMIT:
        return None
    C, D = np.shape(_factor_source(fit)["M"])[:2]
    per_chain = max(1, int(FACTOR_BYTES_LIMIT // (nbytes / (C * D) * C)))
    kept = kept_factor_draws(C, D, per_chain * C).size
    warnings.warn(
        f"the fit's factor draws ({C} chain{'s' if C != 1 else ''} x {D} draws) take "
        f"{nbytes / 2**30:.2f} GiB, above the limit of {FACTOR_BYTES_LIMIT / 2**30:g} GiB "
        "(bmczoo.inference.saving.FACTOR_BYTES_LIMIT): the file keeps "
        f"{kept} of the {D} draws of each chain ({C * kept} in all), evenly spaced.  The "
        "loaded fit's predictions at entries other than those accumulated during the fit "
        "(test=, predict=), its log predictive density, recommendations and fold-in average "
        "over the kept draws only and will differ from this fit's; save with "
        "factor_draws='all' to keep every draw.",
        FactorDrawsThinnedWarning,
        stacklevel=stacklevel + 1,
    )
    return per_chain * C


def kept_factor_draws(num_chains: int, num_draws: int, limit: int) -> np.ndarray:
    """Positions along the draw axis of the factor draws kept for each chain:
    ``max(1, limit // num_chains)`` (at most ``num_draws``) evenly spaced positions, the
    first and last draws included."""
    n = min(num_draws, max(1, limit // num_chains))
    return np.unique(np.rint(np.linspace(0, num_draws - 1, n)).astype(np.int64))


def thin_factor_draws(fit, limit: int | None) -> tuple[dict, dict | None]:
    """``(samples, factor_samples)`` of an MCMC fit as saved with at most ``limit`` factor
    draws (None: all; see the module docstring)."""
    src = fit.factor_samples if getattr(fit, "factor_samples", None) is not None else fit.samples
    if "M" not in src:
        return fit.samples, fit.factor_samples
    C, D = np.shape(src["M"])[:2]
    if limit is None or C * D <= limit:
        return fit.samples, fit.factor_samples
    idx = kept_factor_draws(C, D, limit)
    per_draw = {
        k: np.asarray(v)[:, idx]
        for k, v in src.items()
        if np.ndim(v) >= 2 and np.shape(v)[:2] == (C, D)
    }
    samples = {k: v for k, v in fit.samples.items() if k not in FACTOR_SITES}
    if "theta_sv" not in samples:
        from .._arviz import theta_singular_values

        samples["theta_sv"] = theta_singular_values(src["M"], src["N"])
    return samples, per_draw


def save(
    fit,
    path,
    *,
    extra: dict | None = None,
    factor_draws: int | str | None = "auto",
    overwrite: bool = False,
    _stacklevel: int = 2,
) -> None:
    """Write ``fit`` to ``path`` (see the module docstring).

    The file is written to a temporary file in the same folder and renamed into place, so
    that ``path`` never holds a half-written fit; it gets the permissions ``0o666`` less
    the process's umask.

    Parameters
    ----------
    fit : FitResult
        The fit to write.
    path : str or os.PathLike
        The ``.npz`` file.
    extra : dict of arrays, optional
        Arrays stored beside the fit under ``x/<name>`` (e.g. the command line's dataset
        ids), read back by :func:`load_extra`; :func:`load` ignores them.
    factor_draws : "auto", "all", int or None
        Factor draws of an MCMC fit kept: ``"auto"`` (the default; None is the same) every
        draw unless they take more than :data:`FACTOR_BYTES_LIMIT`, then as many as fit
        under it (with a :class:`FactorDrawsThinnedWarning`); ``"all"`` every draw; an
        integer at most that many in all chains pooled.
    overwrite : bool
        Replace an existing file at ``path`` (default False: ``FileExistsError``, as
        ``bmczoo fit --save`` without ``--overwrite``).

    Raises
    ------
    FileExistsError
        ``path`` exists and ``overwrite`` is False (nothing is written).
    IsADirectoryError
        ``path`` is a folder.
    FileNotFoundError
        The folder of ``path`` does not exist.
    OSError
        The file cannot be written (a read-only folder: ``PermissionError``, a full disk);
        the message names ``path``.
    """
    if _CLASSES.get(type(fit).__name__) is not type(fit):
        raise TypeError(f"cannot save a {type(fit).__name__}")
    from .._checks import check_bool, check_path

    target = Path(check_path("path", path))
    overwrite = check_bool("overwrite", overwrite)
    limit = _check_factor_draws(factor_draws)
    _check_target(target, overwrite)  # before the fit is encoded: the checks are cheap
    if limit == "auto":
        limit = _auto_factor_limit(fit, _stacklevel)
    info = fit.info
    arrays: dict[str, np.ndarray] = {}
    fields, kinds = _encode_fields(fit._saved_fields(limit), arrays)
    state = fit._state_arrays()
    if state:
        arrays.update({"vb/" + k[len("state/") :]: v for k, v in state.items()})
        kinds["state"] = "vbstate"
    meta = _meta(fit, info, arrays, fields, kinds)
    for k, v in (extra or {}).items():
        arrays[f"x/{k}"] = np.asarray(v)
    try:
        write_npz_atomic(
            target,
            compress=True,
            overwrite=overwrite,
            __format__=np.asarray(FORMAT),
            __meta__=np.asarray(json.dumps(meta, default=_json_default)),
            **arrays,
        )
    except FileExistsError:  # created while the fit was written: left as it is
        raise _exists(target) from None


def _exists(path: Path) -> FileExistsError:
    return FileExistsError(
        errno.EEXIST,
        f"cannot save to {str(path)!r}: the file exists; pass overwrite=True to replace it",
    )


def _check_target(path: Path, overwrite: bool) -> None:
    """Raise the ``OSError`` of its kind, naming ``path``, when a fit cannot be saved
    there: a folder, an existing file without ``overwrite``, a missing folder."""
    if path.is_dir():
        raise IsADirectoryError(
            errno.EISDIR, f"cannot save to {str(path)!r}: it is a folder; name a file (fit.npz)"
        )
    if os.path.lexists(path) and not overwrite:
        raise _exists(path)
    folder = path.parent
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(
            errno.ENOTDIR, f"cannot save to {str(path)!r}: {str(folder)!r} is a file, not a folder"
        )
    if not folder.exists():
        raise FileNotFoundError(
            errno.ENOENT, f"cannot save to {str(path)!r}: the folder {str(folder)!r} does not exist"
        )


def _encode_fields(values: dict, arrays: dict) -> tuple[dict, dict]:
    """Sort a fit's saved fields into JSON ``fields`` and ``arrays`` (added to in place);
    ``kinds`` records which, so that :func:`load` rebuilds each as it was."""
    fields: dict = {}
    kinds: dict = {}
    for name, v in values.items():
        if name in _SKIP:
            continue
        if v is None:
            kinds[name] = "none"
        elif isinstance(v, _NoGamma):
            kinds[name] = "no_gamma"
        elif isinstance(v, dict):
            kinds[name] = "dict"
            for k, x in v.items():
                arrays[f"f/{name}/{k}"] = np.asarray(x)
        elif (
            isinstance(v, np.ndarray)
            or hasattr(v, "__array__")
            and not isinstance(v, (int, float, bool))
        ):
            kinds[name] = "array"
            arrays[f"f/{name}"] = np.asarray(v)
        elif isinstance(v, tuple):
            kinds[name] = "tuple"
            fields[name] = list(v)
        else:
            kinds[name] = "scalar"
            fields[name] = v
    return fields, kinds


def _meta(fit, info, arrays: dict, fields: dict, kinds: dict) -> dict:
    """The file's JSON metadata (the prior's links and the biases' features go to
    ``arrays``)."""
    prior_meta = {"name": info.prior.name, "hyperparameters": info.prior.hyperparameters()}
    links = _prior_links(info.prior, arrays)
    if links is not None:  # absent without links: files of other priors are unchanged
        prior_meta["links"] = links
    return {
        "format": FORMAT,
        "class": type(fit).__name__,
        "method": info.method,
        "prior": prior_meta,
        "likelihood": info.likelihood.describe(),
        "biases": _biases_meta(info.biases, arrays),
        **({"offsets": [o.describe() for o in info.offsets]} if info.offsets else {}),
        "K": int(info.K),
        "shape": [int(x) for x in info.shape],
        "shift": {
            "offset": float(info.shift.offset),
            "lo": float(info.shift.lo),
            "hi": float(info.shift.hi),
        },
        "center": bool(info.center),
        "seed": int(info.seed),
        "dtype": info.dtype,
        "tau": float(info.tau),
        "settings": info.settings.as_dict(),
        "fields": fields,
        "kinds": kinds,
    }


_FEATURE_ARRAYS = ("indptr", "indices", "values", "names", "groups")


def _biases_meta(biases, arrays: dict) -> dict | None:
    """The biases' description for the metadata; with features, their specification as a
    prior's (:func:`_prior_links`, tables under ``b/<name>/...``)."""
    if biases is None:
        return None
    out = biases.describe()
    if biases.linked_sides:
        out["links"] = _prior_links(biases, arrays, prefix="b")
    return out


def _prior_links(prior, arrays: dict, prefix: str = "p") -> dict | None:
    """The feature-link specification of ``prior`` for the metadata (None when it has no
    links); a :class:`~bmczoo.data.Features` table it holds goes into ``arrays`` under
    ``<prefix>/<name>/...`` and is named ``"table"`` in the specification."""
    if not getattr(prior, "linked_sides", ()):
        return None
    out = {"implicit": prior.implicit}
    for name in ("row_features", "col_features"):
        spec = getattr(prior, name)
        if spec is None or spec is True:
            out[name] = spec
            continue
        X = spec.features
        out[name] = "table"
        for k in _FEATURE_ARRAYS:
            v = getattr(X, k)
            arrays[f"{prefix}/{name}/{k}"] = (
                np.asarray(v, dtype=str) if k in ("names", "groups") else np.asarray(v)
            )
    return out


def _link_kwargs(links: dict | None, data: dict, path, prefix: str = "p") -> dict:
    """The keyword arguments of the feature links saved by :func:`_prior_links`."""
    if not links:
        return {}
    from ..data import Features

    kw = {"implicit": links.get("implicit", False)}
    for name in ("row_features", "col_features"):
        spec = links.get(name)
        if spec == "table":
            try:
                a = {k: data[f"{prefix}/{name}/{k}"] for k in _FEATURE_ARRAYS}
            except KeyError as err:
                raise ValueError(
                    f"{str(path)!r}: the saved prior's {name} table lacks its array {err.args[0]!r}"
                ) from None
            spec = Features(
                a["indptr"],
                a["indices"],
                a["values"],
                [str(x) for x in a["names"]],
                [str(x) for x in a["groups"]],
            )
        kw[name] = spec
    return kw


def _settings(method: str, d: dict):
    from .settings import SETTINGS

    cls = SETTINGS[method]
    kw = {
        k: v
        for k, v in d.items()
        if k in cls.argument_names() and k not in ("devices", "checkpoint", "track")
    }
    for k, v in kw.items():
        if isinstance(v, list):
            kw[k] = tuple(v)
    try:
        return cls(**kw)
    except Exception:  # settings of another version: the defaults (only metadata)
        return cls()


_ZIP_MAGIC = b"PK\x03\x04"


def _read_npz(path) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` file ``path``: ``FileNotFoundError`` when there is no
    such file, ``ValueError`` naming the path when it is not an ``.npz`` archive (a text
    file, an ``.npy`` array, ...: never read with pickle)."""
    not_fit = (
        f"{str(path)!r} is not a saved bmczoo fit (a file written by fit.save or bmczoo fit --save)"
    )
    with open(path, "rb") as fh:  # FileNotFoundError, IsADirectoryError name the path
        if fh.read(len(_ZIP_MAGIC)) != _ZIP_MAGIC:
            raise ValueError(f"{not_fit}: it is not an .npz archive")
        fh.seek(0)
        try:
            with np.load(fh, allow_pickle=False) as f:
                return {k: f[k] for k in f.files}
        except Exception as err:  # noqa: BLE001 - a damaged or foreign zip file: reported as such
            raise ValueError(
                f"{not_fit}: its .npz archive cannot be read ({type(err).__name__})"
            ) from None


def load(path):
    """Read a fit written by ``fit.save``: ``FileNotFoundError`` when ``path`` does not
    exist, ``ValueError`` naming the path for another kind of file or a newer format.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npz`` file.

    Returns
    -------
    FitResult
        A result of the class that was saved.
    """
    data = _read_npz(path)
    found = str(data.pop("__format__", ""))
    m = re.fullmatch(r"bmczoo-fit-(\d+)", found)
    if m is None:
        raise ValueError(f"{str(path)!r} is not a saved bmczoo fit (no {FORMAT!r} format string)")
    if int(m.group(1)) > VERSION:
        raise ValueError(
            f"{str(path)!r} was saved in format {found}, newer than this bmczoo reads ({FORMAT}): "
            "upgrade bmczoo"
        )
    meta = json.loads(str(data.pop("__meta__")))
    info = _info_from_meta(meta, data, path)
    prior = info.prior
    cls = _CLASSES[meta["class"]]
    kw = {}
    for name, kind in meta["kinds"].items():
        if kind == "none":
            kw[name] = None
        elif kind == "no_gamma":
            kw[name] = no_gamma(prior)
        elif kind == "dict":
            pre = f"f/{name}/"
            kw[name] = {k[len(pre) :]: v for k, v in data.items() if k.startswith(pre)}
        elif kind == "array":
            kw[name] = data[f"f/{name}"]
        elif kind == "tuple":
            kw[name] = tuple(meta["fields"][name])
        elif kind == "scalar":
            kw[name] = meta["fields"][name]
        elif kind == "vbstate":
            kw.update(
                cls._state_from_arrays(
                    {"state/" + k[3:]: v for k, v in data.items() if k.startswith("vb/")}
                )
            )
    return cls(info=info, **kw)


def _info_from_meta(meta: dict, data: dict, path) -> FitInfo:
    """The fit's typed info from its saved description (and the link arrays in ``data``)."""
    from ..likelihoods import get_likelihood
    from ..offsets import Biases, Offset, Shift
    from ..priors import get_prior

    lik = dict(meta["likelihood"])
    prior = get_prior(
        meta["prior"]["name"],
        **meta["prior"]["hyperparameters"],
        **_link_kwargs(meta["prior"].get("links"), data, path),
    )
    likelihood = get_likelihood(lik.pop("name"), **lik)
    biases = None
    if meta["biases"] is not None:
        b = dict(meta["biases"])
        b.pop("name", None)
        links = b.pop("links", None)
        biases = Biases(**b, **_link_kwargs(links, data, path, prefix="b"))
    sh = meta["shift"]
    return FitInfo(
        method=meta["method"],
        prior=prior,
        likelihood=likelihood,
        K=int(meta["K"]),
        shape=tuple(meta["shape"]),
        shift=Shift(sh["offset"], sh["lo"], sh["hi"]),
        center=meta["center"],
        seed=meta["seed"],
        dtype=meta["dtype"],
        settings=_settings(meta["method"], meta["settings"]),
        tau=meta["tau"],
        biases=biases,
        offsets=tuple(Offset.from_description(d) for d in meta.get("offsets", ())),
    )


def load_extra(path) -> dict:
    """The ``extra`` arrays saved with a fit (``{}`` when there are none)."""
    return {k[2:]: v for k, v in _read_npz(path).items() if k.startswith("x/")}
