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
