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
    # these import much more (NumPy, jsonschema, HTML templates): load on first use
    if name in ("stats", "validate", "grep", "pretty", "diff", "convert"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(name)
