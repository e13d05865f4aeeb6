"""LM Challenge 5.x's ``lmchallenge.core`` package path: :mod:`lmchallenge.core.model` holds
its model classes and :mod:`lmchallenge.core.common` the helpers 5.x models use; as in 5.x,
``lmchallenge.core.Model`` (and every name of those two) is here too, imported on first use
(the project's own modules are described in docs/architecture.md)."""

from __future__ import annotations

import importlib
from typing import Any

_SUBMODULES = ("model", "common")   # whose names are the package's too, as in 5.x
_OTHER_MODULES = ("errors",)        # wr's typo model: lmchallenge.core.errors.DEFAULT_CONFIG


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES + _OTHER_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    for submodule in _SUBMODULES:
        module = importlib.import_module(f"{__name__}.{submodule}")
        if name in module.__all__:
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
