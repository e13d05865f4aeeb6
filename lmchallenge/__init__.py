"""LM Challenge: fair evaluation of predictive language models (5.x compatible).

Python API (as LM Challenge 5.x)::

    import lmchallenge as lmc
    log = list(lmc.wc(model, ["one potato two potato three"]))
    lmc.stats.stats(log)

* games: :func:`wc`, :func:`we`, :func:`ce`, :func:`wr` -> iterators of log datums;
* models: :class:`Model`, :class:`WordModel`, :class:`FilteringWordModel`, :class:`ShellModel`;
* logs: :func:`load_jsonlines`, :func:`dump_jsonlines`, :mod:`lmchallenge.stats`,
  :mod:`lmchallenge.validate`, :mod:`lmchallenge.grep`, :mod:`lmchallenge.pretty`,
  :mod:`lmchallenge.diff`.
"""

from . import stats, validate  # noqa: F401  (submodules of the public API)
from .games import ce, wc, we, wr
from .log import dump_jsonlines, load_jsonlines
from .model import FilteringWordModel, Model, ShellModel, WordModel
from .tokenize import CHARACTER_TOKENIZER, WORD_TOKENIZER

__all__ = [
    "wc", "we", "ce", "wr", "Model", "WordModel", "FilteringWordModel", "ShellModel",
    "load_jsonlines", "dump_jsonlines", "stats", "validate", "grep", "pretty", "diff",
    "WORD_TOKENIZER", "CHARACTER_TOKENIZER",
]


def __getattr__(name: str):
    # grep, pretty and diff import more (HTML templates, the reranking fit): load on use
    if name in ("grep", "pretty", "diff", "convert"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(name)
