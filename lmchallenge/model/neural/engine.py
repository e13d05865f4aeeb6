"""Forward passes of a causal LM in fixed-shape chunks, so answers do not depend on batching.

LM Challenge compares logs line for line: ``lmc run`` in process, ``lmc run`` over a pipe
and ``lmc-dist`` must write the same numbers, however queries happen to be grouped into
batches.  Floating-point results of a matrix product can change with its shape, so every
forward pass here has one shape, ``[batch, chunk]`` tokens, whatever is asked:

* a token sequence is cut into chunks of ``chunk`` tokens from its start; chunk ``k`` is
  computed with the key/value cache of chunks ``0..k-1`` (full chunks, computed the same way)
  and, when the sequence ends inside it, right-padded to ``chunk`` tokens.  With causal
  attention a position's output depends only on the tokens up to it; padding after it gets
  attention weight exactly 0 and fills rows of the matrix products that are never read.
* ``batch`` rows go through each pass; unused rows repeat a used one.

So the log-probabilities at a position are a function of the tokens up to it alone.  Rows
already computed are kept (least recently used first out): the queries of one line share
their context (one pass per chunk of the line for ``we``), completion search reuses the
context's cache.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

Tokens = tuple[int, ...]


@dataclass
class _Lru:
    """A small least-recently-used map."""

    size: int
    items: collections.OrderedDict = field(default_factory=collections.OrderedDict)

    def get(self, key: Any) -> Any:
        value = self.items.get(key)
        if value is not None:
            self.items.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> None:
        self.items[key] = value
        self.items.move_to_end(key)
        while len(self.items) > self.size:
            self.items.popitem(last=False)


def _cache_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-layer ``(keys, values)`` of a transformers cache object or legacy tuple."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(layer.keys, layer.values) for layer in layers]
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache))
    return [(k, v) for k, v in cache]


class ChunkedLM:
    """Log-probabilities of next tokens at chosen positions of token sequences.

    Args:
        model: a transformers causal LM (``model(input_ids, past_key_values=...)``).
        chunk: tokens per forward pass row (the fixed sequence length of every pass).
        batch: rows per forward pass.
        pad_id: the token id that fills the unused end of a chunk.
        keep_rows: chunks of log-probabilities kept (each ``chunk x vocabulary`` float32).
        keep_states: key/value caches of prefixes kept.
    """

    def __init__(self, model: Any, chunk: int = 16, batch: int = 1, pad_id: int = 0,
                 keep_rows: int = 48, keep_states: int = 64):
        self.model = model
        self.chunk = chunk
        self.batch = batch
        self.pad_id = pad_id
        self.device = next(model.parameters()).device
        self._rows: _Lru = _Lru(keep_rows)       # (past, content) -> np.ndarray [len, V]
        self._states: _Lru = _Lru(keep_states)   # prefix of whole chunks -> per-layer (k, v)
        self.forward_passes = 0

    # -- the one public question
    def rows(self, tokens: Tokens, positions: list[int]) -> dict[int, np.ndarray]:
        """Log-probabilities (natural log, float32 ``[vocabulary]``) of the token after each
        position of ``tokens`` in ``positions`` (0-based, each ``< len(tokens)``)."""
        return self.rows_many([(tokens, positions)])[0]

    def rows_many(self, requests: list[tuple[Tokens, list[int]]]) -> list[dict[int, np.ndarray]]:
        """:meth:`rows` for many sequences, sharing forward passes where they share chunks."""
        c = self.chunk
        last_chunk = [max(positions) // c if positions else -1 for _, positions in requests]
        answers: list[dict[int, np.ndarray]] = [{} for _ in requests]
        for k in range(max(last_chunk, default=-1) + 1):
            work: dict[Tokens, list[Tokens]] = {}
            for (tokens, _), last in zip(requests, last_chunk):
                if last < k:
                    continue
                past, content = tokens[:k * c], tokens[k * c:(k + 1) * c]
                if self._find(past, content) is None or (
                        len(content) == c and last > k and self._states.get(past + content) is None):
                    work.setdefault(past, []).append(content)
            computed: dict[tuple[Tokens, Tokens], np.ndarray] = {}
            for past, contents in work.items():
                computed.update(self._compute(past, _maximal(contents)))
            for (tokens, positions), found in zip(requests, answers):
                past, content = tokens[:k * c], tokens[k * c:(k + 1) * c]
                wanted = [p for p in positions if p // c == k]
                if wanted:
                    rows = _covering(computed, past, content)
                    if rows is None:
                        rows = self._find(past, content)
                    assert rows is not None, "rows were computed above"
                    for position in wanted:
                        found[position] = rows[position - k * c]
        return answers

    # -- internals
    def _find(self, past: Tokens, content: Tokens) -> np.ndarray | None:
        """Cached rows for ``content`` after ``past`` (from a computed content that extends
        it: rows before the end of a content do not depend on what follows)."""
        entry = self._rows.get((past, content))
        if entry is not None:
            return entry
        for (other_past, other), rows in reversed(self._rows.items.items()):
            if other_past == past and len(other) > len(content) and other[:len(content)] == content:
                return rows
        return None

    def _past_cache(self, past: Tokens) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        if not past:
            return None
        state = self._states.get(past)
        if state is None:  # evicted: recompute the chain of whole chunks (rare)
            c = self.chunk
            for k in range(len(past) // c):
                if self._states.get(past[:(k + 1) * c]) is None:
                    self._compute(past[:k * c], [past[k * c:(k + 1) * c]])
            state = self._states.get(past)
        return state

    @torch.inference_mode()
    def _compute(self, past: Tokens, contents: list[Tokens]) -> dict[tuple[Tokens, Tokens], np.ndarray]:
        """Forward passes of ``contents`` (each at most one chunk) after the same ``past``;
        their rows by ``(past, content)`` (also kept in the cache)."""
        computed = {}
        from transformers import DynamicCache
        c, b = self.chunk, self.batch
        state = self._past_cache(past)
        for start in range(0, len(contents), b):
            group = contents[start:start + b]
            rows = [list(content) + [self.pad_id] * (c - len(content)) for content in group]
            rows += [rows[0]] * (b - len(rows))
            input_ids = torch.tensor(rows, dtype=torch.long, device=self.device)
            cache = None
            if state is not None:
                cache = DynamicCache([(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1))
                                      for k, v in state])
            else:
                cache = DynamicCache()
            out = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True)
            self.forward_passes += 1
            logprobs = torch.log_softmax(out.logits.float(), dim=-1).cpu().numpy()
            layers = _cache_tensors(out.past_key_values)
            for i, content in enumerate(group):
                rows = logprobs[i, :len(content)].copy()
                computed[(past, content)] = rows
                self._rows.put((past, content), rows)
                if len(content) == c:
                    self._states.put(past + content,
                                     [(k[i:i + 1].clone(), v[i:i + 1].clone()) for k, v in layers])
        return computed


def _covering(computed: dict[tuple[Tokens, Tokens], np.ndarray], past: Tokens,
              content: Tokens) -> np.ndarray | None:
    """Rows in ``computed`` for ``content`` after ``past`` (an extension of it will do)."""
    rows = computed.get((past, content))
    if rows is not None:
        return rows
    for (other_past, other), rows in computed.items():
        if other_past == past and other[:len(content)] == content:
            return rows
    return None


def _maximal(contents: list[Tokens]) -> list[Tokens]:
    """The distinct contents that are no prefix of another (their rows cover the others)."""
    unique = sorted(set(contents), key=len, reverse=True)
    kept: list[Tokens] = []
    for content in unique:
        if not any(other[:len(content)] == content for other in kept):
            kept.append(content)
    return kept
