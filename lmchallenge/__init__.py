"""LM Challenge: fair evaluation of predictive language models (5.x compatible).

Python API (as LM Challenge 5.x)::

    import lmchallenge as lmc
    log = list(lmc.wc(model, ["one potato two potato three"]))
    lmc.stats.stats(log)

* games: :func:`wc`, :func:`we`, :func:`ce`, :func:`wr` -> iterators of log datums;
* models: :class:`Model`, :class:`WordModel`, :class:`FilteringWordModel`, :class:`ShellModel`;
* logs: :func:`load_jsonlines`, :func:`dump_jsonlines`, and the modules ``stats``,
  ``validate``, ``grep``, ``pretty``, ``diff`` as 5.x names them (now in
  :mod:`lmchallenge.stats` and :mod:`lmchallenge.analysis`; ``import lmchallenge.grep``
  and the others work too), ``lmchallenge.core.model`` (the model classes) and
  ``lmchallenge.run`` (the games), 5.x's paths; ``python -m lmchallenge`` is ``lmc``.

The layers of the package are described in docs/architecture.md.

Every name is imported on first use (PEP 562), so ``lmc stats`` does not pay for the
games, models and JSON schema validation it does not need.
"""

from __future__ import annotations

import importlib
from typing import Any

_ATTRIBUTES = {
    "wc": "games", "we": "games", "ce": "games", "wr": "games",
    "Model": "model.api", "WordModel": "model.api", "FilteringWordModel": "model.api",
    "ShellModel": "model.shell",
    "load_jsonlines": "logs.jsonl", "dump_jsonlines": "logs.jsonl",
    "WORD_TOKENIZER": "tokenize", "CHARACTER_TOKENIZER": "tokenize",
}
_SUBMODULES = {"stats": "stats", "validate": "analysis.validate", "grep": "analysis.grep",
               "pretty": "analysis.pretty", "diff": "analysis.diff", "convert": "logs.convert",
               "core": "core", "run": "run"}
"""The 5.x module names (``lmc.stats.stats``, ``lmc.grep.grep``, ...) and where they live now."""

__all__ = [
    "wc", "we", "ce", "wr", "Model", "WordModel", "FilteringWordModel", "ShellModel",
    "load_jsonlines", "dump_jsonlines", "stats", "validate", "grep", "pretty", "diff",
    "WORD_TOKENIZER", "CHARACTER_TOKENIZER", "core", "run",
]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{_SUBMODULES[name]}")
    if name in _ATTRIBUTES:
        value = getattr(importlib.import_module(f"{__name__}.{_ATTRIBUTES[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
