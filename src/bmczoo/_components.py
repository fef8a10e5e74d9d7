"""Discovery shared by the component packages (:mod:`bmczoo.priors`,
:mod:`bmczoo.likelihoods`): every module of a package imported and each of its classes
deriving from the package's base class exported, so that a new component is one module."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator

__all__ = ["export_components", "all_subclasses"]


def export_components(package: str, path, base: type, namespace: dict, skip=()) -> None:
    """Import every module of ``package`` (its ``__path__`` ``path``) whose name does not
    start with ``_`` and is not in ``skip``, and put each subclass of ``base`` it defines
    into ``namespace`` (the package's globals) and its ``__all__``."""
    exported = namespace["__all__"]
    for info in pkgutil.iter_modules(path):
        if info.name.startswith("_") or info.name in skip:
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, base)
                and obj is not base
                and obj.__module__ == module.__name__
            ):
                namespace[name] = obj
                if name not in exported:
                    exported.append(name)


def all_subclasses(cls: type) -> Iterator[type]:
    """Every subclass of ``cls``, depth first."""
    for sub in cls.__subclasses__():
        yield sub
        yield from all_subclasses(sub)
