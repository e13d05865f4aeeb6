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
* ``batch`` rows go through each pass, each after its own past (chunk ``k`` of any sequence
  follows ``k`` whole chunks, so the rows of one pass may come from different lines); unused
  rows repeat a used one.

So the log-probabilities at a position are a function of the tokens up to it alone.  Rows
already computed are kept (least recently used first out): the queries of one line share
their context (one pass per chunk of the line for ``we``).

**Paths after a head** (:meth:`ChunkedLM.path_rows`: the completion search, and the
candidates of a query with several, which part after its context): a head (a
context's tokens) is computed by chunks as above, its key/value cache kept; for a path of
tokens after it only the path's last token goes through the model, in a pass of shape
``[width, 1]`` whose past is the head's cache and the path's earlier tokens' (its prefix,
computed the same way, first where it is not kept), right-padded with masked slots to a capacity
that depends on the path's length alone (8, 16, 32, ... tokens).  So a path's row is a
function of the head and the path, whichever paths share its pass, and it costs a fraction of
a chunk's pass (BENCHMARKS.md, "neural": 16 paths in one pass).  Its floats may differ in the
last bits from the same position's row computed by chunks.
"""

from __future__ import annotations

import collections
import inspect
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


def _capacity(size: int) -> int:
    """The padded slots for a path's ``size`` earlier tokens: 8, 16, 32, ..."""
    capacity = 8
    while capacity < size:
        capacity *= 2
    return capacity


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
        model: a transformers causal LM (``model(input_ids, cache=...)``, before
            transformers 5 ``past_key_values=...``).
        chunk: tokens per forward pass row (the fixed sequence length of every pass).
        batch: rows per forward pass.
        pad_id: the token id that fills the unused end of a chunk.
        keep_rows: chunks of log-probabilities kept (each ``chunk x vocabulary`` float32).
        keep_states: key/value caches of prefixes kept (at least ``8 * batch``).
        width: paths per forward pass of :meth:`path_rows`.
        keep_paths: paths' rows and key/value caches kept (each a ``vocabulary`` float32 row).
    """

    def __init__(self, model: Any, chunk: int = 16, batch: int = 1, pad_id: int = 0,
                 keep_rows: int = 48, keep_states: int = 64, width: int = 16,
                 keep_paths: int = 256):
        self.model = model
        self.chunk = chunk
        self.batch = batch
        self.pad_id = pad_id
        self.device = next(model.parameters()).device
        self._rows: _Lru = _Lru(keep_rows)       # (past, content) -> np.ndarray [len, V]
        # whole chunks, or a head -> per-layer (k, v); a pass's rows each need their past's
        self._states: _Lru = _Lru(max(keep_states, 8 * batch))
        self.width = width
        self._heads: _Lru = _Lru(8)              # head -> its cache, [layers, 2, 1, H, len, D]
        self._paths: _Lru = _Lru(keep_paths)     # head + path -> (row, [layers, 2, 1, H, len, D])
        self.forward_passes = 0
        # transformers 5 renamed ``past_key_values`` to ``cache`` (the old name goes in 5.40)
        parameters = inspect.signature(model.forward).parameters
        self._cache_keyword = "cache" if "cache" in parameters else "past_key_values"

    # -- the public questions
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
            kept: dict[tuple[Tokens, Tokens], np.ndarray] = {}  # held: the cache may drop them
            for (tokens, _), last in zip(requests, last_chunk):
                if last < k:
                    continue
                past, content = tokens[:k * c], tokens[k * c:(k + 1) * c]
                rows = self._find(past, content)
                if rows is not None:
                    kept[past, content] = rows
                if rows is None or (
                        len(content) == c and last > k and self._states.get(past + content) is None):
                    work.setdefault(past, []).append(content)
            computed = self._compute([(past, content) for past, contents in work.items()
                                      for content in _maximal(contents)])
            for (tokens, positions), found in zip(requests, answers):
                past, content = tokens[:k * c], tokens[k * c:(k + 1) * c]
                wanted = [p for p in positions if p // c == k]
                if wanted:
                    rows = _covering(computed, past, content)
                    if rows is None:
                        rows = kept[past, content]
                    for position in wanted:
                        found[position] = rows[position - k * c]
        return answers

    def path_rows(self, head: Tokens, paths: list[Tokens]) -> list[np.ndarray]:
        """Log-probabilities (natural log, float32 ``[vocabulary]``) of the token after
        ``head + path`` for each path (see the module doc; ``head`` non-empty).  The empty
        path's row is the head's last, computed by chunks.

        Other paths go through in rounds: a path whose shorter prefix is asked too comes a
        round after it; within a round, passes of ``width`` paths of one capacity.  A prefix
        that is neither asked nor kept is computed first, alone."""
        self._head_cache(head)  # the head's last chunk: its rows and cache in one pass
        asked = dict.fromkeys(paths)
        found: dict[Tokens, np.ndarray] = {}
        rounds: dict[tuple[int, int], list[Tokens]] = {}
        for path in asked:
            if not path:
                found[path] = self.rows(head, [len(head) - 1])[len(head) - 1]
                continue
            entry = self._paths.get(head + path)
            if entry is not None:
                found[path] = entry[0]
                continue
            depth, parent = 0, path[:-1]
            while parent and parent in asked and self._paths.get(head + parent) is None:
                depth, parent = depth + 1, parent[:-1]
            rounds.setdefault((depth, _capacity(len(path) - 1)), []).append(path)
        caches: dict[Tokens, torch.Tensor] = {}
        for key in sorted(rounds):
            group = rounds[key]
            for start in range(0, len(group), self.width):
                for path, (row, cache) in self._step(head, group[start:start + self.width],
                                                     key[1], caches).items():
                    found[path], caches[path] = row, cache
        return [found[path] for path in paths]

    # -- internals
    def _head_cache(self, head: Tokens) -> torch.Tensor:
        """The key/value cache of ``head``'s tokens, ``[layers, 2, 1, heads, len, dim]``,
        computed by chunks (the last one padded, its padding's cache dropped)."""
        cache = self._heads.get(head)
        if cache is None:
            state = self._states.get(head)
            if state is None:
                c = self.chunk
                whole = (len(head) - 1) // c * c
                self._compute([(head[:whole], head[whole:])], keep_state=True)
                state = self._states.get(head)
            cache = torch.stack([torch.stack([k, v]) for k, v in state])
            self._heads.put(head, cache)
        return cache

    def _path_cache(self, head: Tokens, path: Tokens,
                    caches: dict[Tokens, torch.Tensor]) -> torch.Tensor:
        """The key/value cache of ``path``'s own tokens after ``head`` (empty for ``()``),
        from ``caches``, else kept, else computed (the same numbers)."""
        if not path:
            return self._head_cache(head)[:, :, :, :, :0]
        if path in caches:
            return caches[path]
        entry = self._paths.get(head + path)
        if entry is None:
            entry = self._step(head, [path], _capacity(len(path) - 1), caches)[path]
        caches[path] = entry[1]
        return entry[1]

    @torch.inference_mode()
    def _step(self, head: Tokens, group: list[Tokens], capacity: int,
              caches: dict[Tokens, torch.Tensor]) -> dict[Tokens, tuple[np.ndarray, torch.Tensor]]:
        """One ``[width, 1]`` pass: the last token of each path in ``group`` (at most
        ``width``, each with ``len(path) - 1 <= capacity``) after ``head`` and its earlier
        tokens (their caches from ``caches`` or kept); each path's row and cache."""
        from transformers import DynamicCache
        parents = [self._path_cache(head, path[:-1], caches) for path in group]
        head_cache = self._head_cache(head)
        size = len(head)
        rows = group + [group[0]] * (self.width - len(group))
        parents += [parents[0]] * (self.width - len(group))
        layers, _, _, heads, _, dim = head_cache.shape
        past = head_cache.new_zeros((layers, 2, self.width, heads, size + capacity, dim))
        past[:, :, :, :, :size] = head_cache
        mask = torch.zeros((self.width, size + capacity + 1), dtype=torch.long, device=self.device)
        mask[:, :size] = 1
        mask[:, -1] = 1
        for i, parent in enumerate(parents):
            length = parent.shape[4]
            past[:, :, i:i + 1, :, size:size + length] = parent
            mask[i, size:size + length] = 1
        input_ids = torch.tensor([[path[-1]] for path in rows], dtype=torch.long,
                                 device=self.device)
        positions = torch.tensor([[size + len(path) - 1] for path in rows], dtype=torch.long,
                                 device=self.device)
        logits, cache = self._forward(DynamicCache([(k, v) for k, v in past]),
                                      input_ids=input_ids, position_ids=positions,
                                      attention_mask=mask)
        logprobs = torch.log_softmax(logits[:, -1].float(), dim=-1).cpu().numpy()
        new = torch.stack([torch.stack([k[:, :, -1:], v[:, :, -1:]])
                           for k, v in _cache_tensors(cache)])
        computed = {}
        for i, path in enumerate(group):
            cache = torch.cat([parents[i], new[:, :, i:i + 1]], dim=4)
            computed[path] = (logprobs[i].copy(), cache)
            self._paths.put(head + path, computed[path])
        return computed

    def _forward(self, cache: Any, **inputs: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """One forward pass: its logits and key/value cache."""
        out = self.model(**inputs, **{self._cache_keyword: cache}, use_cache=True)
        self.forward_passes += 1
        returned = out.get("cache")  # transformers 5; ``past_key_values`` before
        return out.logits, returned if returned is not None else out.past_key_values

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
                    self._compute([(past[:k * c], past[k * c:(k + 1) * c])])
            state = self._states.get(past)
        return state

    @torch.inference_mode()
    def _compute(self, pairs: list[tuple[Tokens, Tokens]],
                 keep_state: bool = False) -> dict[tuple[Tokens, Tokens], np.ndarray]:
        """Forward passes of ``(past, content)`` pairs (each content at most one chunk, every
        past of the same length, a whole number of chunks), ``batch`` pairs a pass whatever
        their pasts; their rows by pair (also kept in the cache).  The key/value cache of
        ``past + content`` is kept for whole chunks, and for every content if ``keep_state``."""
        computed = {}
        c, b = self.chunk, self.batch
        for start in range(0, len(pairs), b):
            group = pairs[start:start + b]
            rows = [list(content) + [self.pad_id] * (c - len(content)) for _, content in group]
            rows += [rows[0]] * (b - len(rows))
            input_ids = torch.tensor(rows, dtype=torch.long, device=self.device)
            logits, cache = self._forward(self._batch_cache([past for past, _ in group]),
                                          input_ids=input_ids)
            logprobs = torch.log_softmax(logits.float(), dim=-1).cpu().numpy()
            layers = _cache_tensors(cache)
            for i, (past, content) in enumerate(group):
                rows = logprobs[i, :len(content)].copy()
                computed[(past, content)] = rows
                self._rows.put((past, content), rows)
                if len(content) == c or keep_state:
                    end = len(past) + len(content)
                    self._states.put(past + content, [(k[i:i + 1, :, :end].clone(),
                                                       v[i:i + 1, :, :end].clone())
                                                      for k, v in layers])
        return computed

    def _batch_cache(self, pasts: list[Tokens]) -> Any:
        """The key/value cache of a pass whose rows follow ``pasts`` (one each, then the
        first again to fill ``batch`` rows; all of one length)."""
        from transformers import DynamicCache
        assert len({len(past) for past in pasts}) == 1, "a pass's pasts are of one length"
        if not pasts[0]:
            return DynamicCache()
        b = self.batch
        if all(past == pasts[0] for past in pasts):  # the common case: no copy
            state = self._past_cache(pasts[0])
            return DynamicCache([(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1))
                                 for k, v in state])
        states = [self._past_cache(past) for past in pasts]
        states += [states[0]] * (b - len(states))
        return DynamicCache([(torch.cat([state[layer][0] for state in states]),
                              torch.cat([state[layer][1] for state in states]))
                             for layer in range(len(states[0]))])


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
