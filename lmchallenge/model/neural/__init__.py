"""Neural (causal transformer) language models in LM Challenge: ``pip install '.[neural]'``.

* :mod:`lmchallenge.model.neural.words` — whole-word probabilities and completions from a
  subword-token language model (the word-boundary term of Pimentel & Meister 2024);
* :mod:`lmchallenge.model.neural.engine` — the forward passes, in fixed-shape chunks, so that an
  answer is the same however queries are batched;
* :mod:`lmchallenge.model.neural.loading` — a Hugging Face model directory or a ``.gguf`` file;
* :mod:`lmchallenge.model.neural.adapter` — :class:`~lmchallenge.model.neural.adapter.CausalLM`, the
  in-process ``module:Class`` model (``lmchallenge.model.neural.adapter:CausalLM``);
* :mod:`lmchallenge.cli.neural` — ``lmc-neural serve MODEL`` (the line protocol).

Importing this package imports neither torch nor transformers; its modules do.
"""

from __future__ import annotations

import importlib.util

NEEDED = ("torch", "transformers")
"""The modules of the ``neural`` extra without which no neural model loads (``gguf`` is
needed for ``.gguf`` files only)."""

REFUSED_GAMES = {
    "ce": "it scores whole words, and a character's probability would need a sum over every "
          "tokenization that covers the next character (Vieira et al. 2024, \"From Language "
          "Models over Tokens to Language Models over Characters\"), which is not implemented; "
          "no approximation is given (docs/neural.md)",
}
"""The games a neural model does not play, with why
(:attr:`lmchallenge.model.api.Model.refuses`; ``lmc-neural serve`` refuses the game in
``LMC_GAME``)."""

INSTALL = "pip install 'lmchallenge-dist[neural]'"
"""How to install the ``neural`` extra (from a checkout: ``pip install '.[neural]'``)."""


def missing_modules() -> list[str]:
    """The modules of :data:`NEEDED` that cannot be imported here (none when the extra is
    installed), found without importing them."""
    missing = []
    for name in NEEDED:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # ValueError: sys.modules[name] is None
            found = False
        if not found:
            missing.append(name)
    return missing


def install_hint(missing: list[str]) -> str:
    """What to say when the modules ``missing`` keep a neural model from loading."""
    return (f"the neural extra is not installed (no module {', '.join(map(repr, missing))}): "
            f"{INSTALL}")
