"""How a feature link's arrays are laid out over the devices of a sharded Gibbs sweep
(:mod:`bmczoo.inference.sharding`): the arrays with one entry per row of the linked factor
are split by those rows like the factor, the others are replicated.

Each device then computes the link's per-row products on its own rows with the same
functions as on one device (:func:`~bmczoo.priors.macau.coords_mean` gives ``X B`` for its
block of rows; :func:`~bmczoo.priors.macau.coords_stats` gives its block's part of ``V^T
X^T M``, a sum over rows that the sweep adds over the devices), and the link's own block
(``B``, ``lam_B``, ``mu``, ``Lambda``: F x K at most) runs replicated on the
:data:`REPLICATED` arrays.
"""

from __future__ import annotations

__all__ = ["ROW_BLOCKS", "REPLICATED", "link_layout", "replicated_links"]

#: the arrays of :func:`~bmczoo.priors.macau.link_arrays` indexed by the factor's rows and
#: how they are split: ``X`` (m x F, sparse) and ``XV`` (m, r) by their rows, ``Xt``
#: (F x m, sparse) by its columns
ROW_BLOCKS = {"X": "rows", "XV": "rows", "Xt": "cols"}

#: the arrays that do not depend on the rows (the eigenbasis of ``X^T X``): replicated
REPLICATED = ("V", "d", "u", "Vr")


def link_layout(links: dict) -> dict[str, str]:
    """Where each array of a prior's links (``"F/name"`` keys of
    :meth:`~bmczoo.priors.NormalWishart.gibbs_links`) goes on a mesh: ``"rows"`` (split by
    its rows), ``"cols"`` (a sparse matrix split by its columns) or ``"replicated"``.

    ``ValueError`` for an array whose layout is not known (its sharded products would be
    wrong, so the run is refused rather than guessed)."""
    for key in links:
        side = key.rpartition("/")[0]
        if key.endswith("/d") and f"{side}/V" not in links:
            # its kept B is recovered through X itself (links_of), which a device holds
            # only a block of
            raise ValueError(
                f"the feature link of {side} uses the row-side decomposition (fewer rows than "
                "features, over 4,096 features): a linked fit with it runs on one device "
                "(drop devices=)"
            )
    out = {}
    for key in links:
        name = key.rpartition("/")[2]
        if name in ROW_BLOCKS:
            out[key] = ROW_BLOCKS[name]
        elif name in REPLICATED:
            out[key] = "replicated"
        else:
            raise ValueError(
                f"the feature link's array {key!r} has no sharded layout: a linked fit with it "
                "runs on one device (drop devices=)"
            )
    return out


def replicated_links(links: dict, layout: dict[str, str]) -> dict:
    """The replicated arrays of ``links`` (what the link's own block reads on a mesh)."""
    return {k: v for k, v in links.items() if layout[k] == "replicated"}
