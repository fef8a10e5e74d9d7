"""The interface of a sampled offset: a term added to ``theta`` at each rating.

An offset component is a frozen dataclass (hashable: a static argument of jitted code)
that owns its variables: how it reads its per-rating data (:meth:`Offset.arrays`), its
start (:meth:`Offset.gibbs_state`), its value at each rating (:meth:`Offset.shift`), its
conditional block given the rest of the model (:meth:`Offset.gibbs_update`) and its NumPyro
sample statements (:meth:`Offset.sample`).  The Gibbs
sweep calls these hooks for every offset of the problem and never branches on a
component's name: the factor blocks fit the ratings minus the offsets, a latent or
weighted likelihood sees ``theta`` plus the offsets, and each offset's block sees the
ratings minus everything else.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
from typing import ClassVar

import jax
import numpy as np

from ..data import Features, RatingData

__all__ = ["Offset", "table_columns", "table_key"]


def table_columns(table: Features | None) -> str | None:
    """A key of a per-rating table's columns (their names and groups, in order): two
    tables with the same key put a feature in the same column."""
    if table is None:
        return None
    h = hashlib.sha1()
    for part in (table.names, table.groups):
        h.update("\x1f".join(part).encode())
        h.update(b"\x1e")
    return h.hexdigest()


def table_key(table: Features | None) -> str | None:
    """A key of a per-rating table's columns and contents (the same rows, the same values)."""
    if table is None:
        return None
    h = hashlib.sha1(table_columns(table).encode())
    for a in (table.indptr, table.indices, table.values):
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class Offset(abc.ABC):
    """Base class of the sampled offsets ``s_k`` added to ``theta_k`` at rating ``k``.

    Parameters
    ----------
    columns : str, optional
        Keyword only: the key of the training ratings' per-rating table's columns
        (``table_columns``), set by :meth:`bind` (``bmc.fit`` binds the offsets it
        samples); a table with other columns is then refused.
    """

    #: the offset's name (the prefix of its variables in the draws)
    name: ClassVar[str] = ""

    #: the key (:func:`table_columns`) of the training ratings' per-rating table, set by
    #: :meth:`bind`: a table with other columns is refused by :meth:`check_columns`
    columns: str | None = dataclasses.field(default=None, kw_only=True, repr=False)

    def bind(self, context: Features | None) -> "Offset":
        """This offset with the columns of the training ratings' table recorded.

        Parameters
        ----------
        context : Features or None
            The training ratings' per-rating table.
        """
        return dataclasses.replace(self, columns=table_columns(context))

    def check_columns(self, context: Features | None, what: str = "the table") -> None:
        """A clear error for a per-rating table whose columns are not the training
        table's (a weight would be read for another feature).

        Parameters
        ----------
        context : Features or None
            A per-rating table.
        what : str
            How the error names the table.
        """
        if self.columns is None or context is None or table_columns(context) == self.columns:
            return
        raise ValueError(
            f"{self.name}: {what} does not have the columns of the training ratings' context "
            f"table ({context.n_features} features here): encode it in the training table's "
            "columns with table.reindex(train.context)"
        )

    @abc.abstractmethod
    def arrays(self, context: Features | None, n: int, dtype) -> dict:
        """The device arrays the offset reads at ``n`` ratings from their per-rating table
        (the sweep asks for them at the ratings in row order, at the entries it predicts
        and at the tracked entries).

        Parameters
        ----------
        context : Features or None
            The ratings' per-rating table (:attr:`bmczoo.data.RatingData.context`, its
            rows in the ratings' order), None where the data has none.
        n : int
            The number of ratings.
        dtype : dtype
            The float dtype of the run.

        Returns
        -------
        dict
            Arrays whose trailing axis runs over the ``n`` positions.
        """

    @abc.abstractmethod
    def gibbs_state(self, arrays: dict, C: int, dtype) -> dict:
        """The variables at the start, ``(C, ...)`` each.

        Parameters
        ----------
        arrays : dict
            What :meth:`arrays` gave at the ratings.
        C : int
            The number of chains.
        dtype : dtype
            The float dtype of the run.
        """

    @abc.abstractmethod
    def shift(self, state: dict, arrays: dict) -> jax.Array:
        """The offset ``s_k`` (C, n) of each chain at the ratings ``arrays`` describe.

        Parameters
        ----------
        state : dict
            The offset's variables, ``(C, ...)`` each.
        arrays : dict
            What :meth:`arrays` gave at the ratings (or at other entries).
        """

    @abc.abstractmethod
    def gibbs_update(
        self, key: jax.Array, state: dict, arrays: dict, target: jax.Array, precision: jax.Array
    ) -> dict:
        """The offset's Gibbs block: a draw of its variables given
        ``target_k ~ N(s_k, 1 / precision_k)``.

        Parameters
        ----------
        key : jax.Array, shape (C,)
            One PRNG key per chain.
        state : dict
            The offset's current variables.
        arrays : dict
            What :meth:`arrays` gave at the ratings (row order).
        target : jax.Array, shape (C, n)
            The ratings (a latent likelihood's ``z``) minus ``theta`` and the other offsets.
        precision : jax.Array, shape (C, n)
            Each rating's precision in the factor blocks (``tau``, times a weighted
            likelihood's weight).

        Returns
        -------
        dict
            The new variables.
        """

    @abc.abstractmethod
    def sample(self, ratings: RatingData) -> jax.Array:
        """The NumPyro sample statements of the offset's variables (sites named with its
        :attr:`name` as prefix) and its value ``s_k`` (n,) at every rating of ``ratings``
        (in their order).

        Parameters
        ----------
        ratings : RatingData
            The observed ratings (with the per-rating tables the offset reads).
        """

    # ------------------------------------------------------------------ VB (optional)
    def vb_state(self, arrays: dict, C: int, dtype) -> dict:
        """The offset's variational parameters at the start, ``(C, ...)`` each (an offset
        without VB hooks is fitted by ``method="gibbs"`` only).

        Parameters
        ----------
        arrays : dict
            What :meth:`arrays` gave at the ratings.
        C : int
            The number of runs.
        dtype : dtype
            The float dtype of the run.
        """
        raise NotImplementedError(f"the {self.name} offset has no VB update")

    def vb_moments(self, q: dict, arrays: dict) -> tuple[jax.Array, jax.Array]:
        """``E_q[s_k]`` and ``Var_q[s_k]`` (C, n) at the entries ``arrays`` describe.

        Parameters
        ----------
        q : dict
            The offset's variational parameters.
        arrays : dict
            What :meth:`arrays` gave (at the ratings or at other entries).
        """
        raise NotImplementedError(f"the {self.name} offset has no VB update")

    def vb_update(self, q: dict, arrays: dict, target: jax.Array, precision: jax.Array) -> dict:
        """The offset's CAVI update: the optimal q of its variables given
        ``target_k ~ N(s_k, 1 / precision_k)`` (the evidence lower bound never decreases).

        Parameters
        ----------
        q : dict
            The offset's current variational parameters.
        arrays : dict
            What :meth:`arrays` gave at the ratings (row order).
        target : jax.Array, shape (C, n)
            The ratings (a latent likelihood's ``E_q[z]``) minus ``E_q[theta]`` and the
            other offsets' means.
        precision : jax.Array, shape (C, n)
            Each rating's precision (``E_q[tau]``, times a weighted likelihood's ``E_q[w]``).
        """
        raise NotImplementedError(f"the {self.name} offset has no VB update")

    def vb_elbo_term(self, q: dict, arrays: dict) -> jax.Array:
        """The offset's part of the evidence lower bound (C,): ``E_q[log p(variables)] -
        E_q[log q(variables)]`` (the likelihood's term sees :meth:`vb_moments`).

        Parameters
        ----------
        q : dict
            The offset's variational parameters.
        arrays : dict
            What :meth:`arrays` gave at the ratings.
        """
        raise NotImplementedError(f"the {self.name} offset has no VB update")

    def vb_draws(self, q: dict, arrays: dict, S: int, rng) -> np.ndarray:
        """``S`` draws (S, n) of the offset from its q (one run: no leading run axis) at
        the entries ``arrays`` describe, with ``rng`` (a :class:`numpy.random.Generator`).

        Parameters
        ----------
        q : dict
            The offset's variational parameters of one run.
        arrays : dict
            What :meth:`arrays` gave.
        S : int
            The number of draws.
        rng : numpy.random.Generator
            The source of the draws.
        """
        raise NotImplementedError(f"the {self.name} offset has no VB update")

    @property
    def has_vb(self) -> bool:
        """Whether the offset implements the VB hooks."""
        return type(self).vb_update is not Offset.vb_update

    def describe(self) -> dict:
        """The name and the settings (JSON-ready: what a saved fit records)."""
        out = {"name": self.name}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    @staticmethod
    def from_description(desc: dict) -> "Offset":
        """The offset a :meth:`describe` dict describes (its class found by name among the
        subclasses of :class:`Offset` imported).

        Parameters
        ----------
        desc : dict
            What :meth:`describe` gave.
        """
        desc = dict(desc)
        name = desc.pop("name")
        todo, found = list(Offset.__subclasses__()), {}
        while todo:
            cls = todo.pop()
            found.setdefault(cls.name, cls)
            todo += cls.__subclasses__()
        if name not in found:
            raise ValueError(
                f"no sampled offset is named {name!r} (known: {', '.join(sorted(found))})"
            )
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in desc.items()}
        return found[name](**kw)

    def draws(self, state: dict, store_factors: bool) -> dict:
        """What is kept of a draw, by the names of the draws (default: every variable,
        prefixed with the offset's name).

        Parameters
        ----------
        state : dict
            The offset's variables.
        store_factors : bool
            Whether the run keeps the factors (variables as large as a factor's rows are
            kept only then).
        """
        return {f"{self.name}_{k}": v for k, v in state.items()}
