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

**Reduced where computed** (:meth:`ChunkedLM.continuations`, ``we``): a pass's
``[batch, chunk, vocabulary]`` log-probabilities are not copied off the device (100 MB a pass
at batch 16 for SmolLM2); a word's score needs only its tokens' log-probabilities and the
probability of a set of tokens (those that end the word) after it, and these are computed
on the device, where the pass ran.

**Paths after a head** (:meth:`ChunkedLM.path_rows`: the completion search, and the
candidates of a query with several, which part after its context): a head (a
context's tokens) is computed by chunks as above, its key/value cache kept; for a path of
tokens after it only the path's last token goes through the model, in a pass of shape
``[width, 1]`` whose past is the head's cache and the path's earlier tokens' (its prefix,
computed the same way, first where it is not kept), padded with masked slots to a capacity
that depends on the path's length alone (8, 16, 32, ... tokens).  So a path's row is a
function of the head and the path, whichever paths share its pass, and it costs a fraction of
a chunk's pass (BENCHMARKS.md, "neural": 16 paths in one pass).  Its floats may differ in the
last bits from the same position's row computed by chunks.  The slots go before the head,
not between it and the path: sliding-window attention (Mistral, Gemma 2 and 3) counts its
window in slots, and a gap there would hide tokens the model should see.
"""

from __future__ import annotations

import collections
import inspect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

Tokens = tuple[int, ...]

MASS_BLOCK = 256
"""Probabilities summed in float32 before the float64 sum, in a set's log-mass."""


@dataclass
class Sums:
    """What :meth:`ChunkedLM.continuations` keeps of one row of a pass (a content after its
    past), natural logs.

    Attributes:
        next: float32 ``[len(content) - 1]``: at position ``i``, the log-probability of
            ``content[i + 1]``.
        last: float32 ``[vocabulary]``: the log-probabilities at the content's last position.
        ends: by set name, float64 ``[len(content)]``: at each position, the log of the
            probability that the next token is one of the set (``ChunkedLM._log_mass``).
    """

    next: np.ndarray
    last: np.ndarray
    ends: dict[str, np.ndarray]


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
            self._dropped(self.items.popitem(last=False)[0])

    def _dropped(self, key: Any) -> None:
        """Called with each key the map lets go of."""


@dataclass
class _ChunkLru(_Lru):
    """An :class:`_Lru` from ``(past, content)`` that also finds a kept content extending
    a shorter one: each content is listed under every one of its prefixes (a chunk's
    contents are short), the latest put first."""

    extending: dict[tuple[Tokens, Tokens], Tokens] = field(default_factory=dict)

    def put(self, key: tuple[Tokens, Tokens], value: Any) -> None:
        past, content = key
        for size in range(1, len(content)):
            self.extending[past, content[:size]] = content
        super().put(key, value)

    def _dropped(self, key: tuple[Tokens, Tokens]) -> None:
        past, content = key
        for size in range(1, len(content)):
            if self.extending.get((past, content[:size])) == content:
                del self.extending[past, content[:size]]

    def extension(self, past: Tokens, content: Tokens) -> Any:
        """The value of the latest kept content after ``past`` that is longer than
        ``content`` and starts with it (``None``: none)."""
        other = self.extending.get((past, content))
        return None if other is None else self.items.get((past, other))


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


Shapes = tuple[tuple[int, int], ...]
"""The ``(heads, dim)`` of each layer's keys and values, in order, where they differ."""


def _stacked(cache: Any, last: int | None = None) -> tuple[torch.Tensor, Shapes | None]:
    """A transformers cache (per layer ``[rows, heads, len, dim]`` keys and values) as one
    tensor ``[layers, 2, rows, heads, len, dim]`` (only the ``last`` positions if given),
    in one copy: one kernel on a GPU where a copy per layer and row took hundreds.

    Keys and values of other shapes than the rest (multi-head latent attention, as in
    DeepSeek-V2, keeps values narrower than keys; some models vary the heads by layer) are
    zero-padded to the largest ``heads`` and ``dim``; their shapes are returned then, for
    :func:`_as_cache` to cut them back (``None``: all of one shape)."""
    layers = _cache_tensors(cache)
    tensors = [t if last is None else t[:, :, -last:] for pair in layers for t in pair]
    shapes = tuple((t.shape[1], t.shape[3]) for t in tensors)
    if len(set(shapes)) == 1:
        return torch.stack(tensors).unflatten(0, (len(layers), 2)), None
    heads, dim = max(h for h, _ in shapes), max(d for _, d in shapes)
    tensors = [torch.nn.functional.pad(t, (0, dim - t.shape[3], 0, 0, 0, heads - t.shape[1]))
               for t in tensors]
    return torch.stack(tensors).unflatten(0, (len(layers), 2)), shapes


def _as_cache(state: torch.Tensor, shapes: Shapes | None = None) -> Any:
    """A ``[layers, 2, rows, heads, len, dim]`` tensor as a transformers cache (views), cut
    back to ``shapes`` if :func:`_stacked` padded them."""
    from transformers import DynamicCache
    if shapes is None:
        return DynamicCache([(layer[0], layer[1]) for layer in state])
    cut = [state[i // 2, i % 2, :, :heads, :, :dim] for i, (heads, dim) in enumerate(shapes)]
    return DynamicCache(list(zip(cut[0::2], cut[1::2])))


class ChunkedLM:
    """Log-probabilities of next tokens at chosen positions of token sequences.

    Args:
        model: a transformers causal LM (``model(input_ids, cache=...)``, before
            transformers 5 ``past_key_values=...``).
        chunk: tokens per forward pass row (the fixed sequence length of every pass).
        batch: rows per forward pass.
        pad_id: the token id that fills the unused end of a chunk.
        keep_rows: chunks of log-probabilities kept (each ``chunk x vocabulary`` float32).
        keep_states: chunks' key/value caches kept (at least ``8 * batch``, and more while
            a longer sequence needs all of its chunks': :meth:`_past_cache`).
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
        self._rows = _ChunkLru(keep_rows)        # (past, content) -> np.ndarray [len, V]
        self._sums = _ChunkLru(max(keep_rows, 16 * batch))  # (past, content) -> Sums
        self._endings: _Lru = _Lru(64)           # a set's name -> its 0/1 vector on the device
        # the tokens up to a chunk's end (a whole chunk, or a head's last) -> the cache of that
        # chunk's own positions, [layers, 2, 1, heads, len(chunk), dim]: a sequence's cache
        # is its chunks', so what is kept grows with its length, not with its square
        self._states: _Lru = _Lru(max(keep_states, 8 * batch))
        self._least_states = self._states.size
        # a past (whole chunks) or a head -> its joined cache, [layers, 2, 1, H, len, D]: the
        # last few (a head of whole chunks is a past, and joins to the same cache)
        self._joined: _Lru = _Lru(4)
        self.width = width
        self._paths: _Lru = _Lru(keep_paths)     # head + path -> (row, [layers, 2, 1, H, len, D])
        self.forward_passes = 0
        self._shapes: Shapes | None = None     # keys' and values' shapes where they differ
        self._product: torch.Tensor | None = None  # _log_mass's [positions, blocks, block]
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
        chunks = self._chunks([(tokens, min(positions, default=0), max(positions, default=-1),
                                {}) for tokens, positions in requests])
        return [{position: found[position // c][position % c] for position in positions}
                for (_, positions), found in zip(requests, chunks)]

    def continuations(self, requests: list[tuple[Tokens, int, str]],
                      endings: Mapping[str, np.ndarray]) -> list[float]:
        """For each ``(tokens, start, ending)`` (``1 <= start <= len(tokens)``), the
        natural-log probability that the model writes ``tokens[start:]`` after
        ``tokens[:start]`` and then one of the tokens of the set ``endings[ending]`` (token
        ids, int64; a name stands for one set throughout)::

            sum(log P(tokens[p + 1] | tokens[:p + 1]) for p in start - 1 .. len - 2)
              + log sum(P(t | tokens) for t in endings[ending])

        The same passes as :meth:`rows_many` (a token's log-probability is the same float),
        but only these numbers leave the device: each pass's rows are reduced where they
        are computed to the next token's log-probability at each position, the log of each
        set's probability at each position (within 4e-7 of the exact log-sum-exp, the same
        bits whatever else the pass holds: ``_log_mass``), and one whole row, the last
        (``batch`` rows of ``vocabulary`` floats a pass instead of ``batch * chunk``).

        The requests whose tokens start another's (the words of a line) are answered from
        the chunks of the longest (:func:`_covers`): one sequence a line to go through, not
        one a word."""
        c = self.chunk
        longest = _covers([tokens for tokens, _, _ in requests])
        plans: dict[Tokens, tuple[int, dict[int, dict[str, None]]]] = {}
        for tokens, start, ending in requests:
            line = longest[tokens]
            first, needs = plans.get(line, (start - 1, {}))
            needs.setdefault((len(tokens) - 1) // c, {})[ending] = None
            plans[line] = (min(first, start - 1), needs)
        chunks = dict(zip(plans, self._chunks(
            [(line, first, len(line) - 1, needs) for line, (first, needs) in plans.items()],
            endings)))
        answers = []
        for tokens, start, ending in requests:
            found = chunks[longest[tokens]]
            total = 0.0
            for p in range(start - 1, len(tokens) - 1):
                sums = found[p // c]
                at = p % c
                total += float(sums.next[at] if at < len(sums.next) else sums.last[tokens[p + 1]])
            end = found[(len(tokens) - 1) // c]
            answers.append(total + float(end.ends[ending][(len(tokens) - 1) % c]))
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
        cache = self._joined.get(head)
        if cache is None:
            c = self.chunk
            whole = (len(head) - 1) // c * c
            last = self._states.get(head)
            if last is None:
                self._compute([(head[:whole], head[whole:])], keep_state=True)
                last = self._states.get(head)
            cache = torch.cat([self._past_cache(head[:whole]), last], dim=4) if whole else last
            self._joined.put(head, cache)
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
        parents = [self._path_cache(head, path[:-1], caches) for path in group]
        head_cache = self._head_cache(head)
        size = len(head)
        rows = group + [group[0]] * (self.width - len(group))
        parents += [parents[0]] * (self.width - len(group))
        layers, _, _, heads, _, dim = head_cache.shape
        past = head_cache.new_zeros((layers, 2, self.width, heads, size + capacity, dim))
        mask = torch.zeros((self.width, size + capacity + 1), dtype=torch.long, device=self.device)
        gaps = [capacity - parent.shape[4] for parent in parents]  # left padding
        for gap in set(gaps):  # the head, one copy into the rows of each gap
            past[:, :, [i for i, g in enumerate(gaps) if g == gap], :, gap:gap + size] = head_cache
        for i, (parent, gap) in enumerate(zip(parents, gaps)):
            past[:, :, i:i + 1, :, gap + size:] = parent
            mask[i, gap:] = 1
        input_ids = torch.tensor([[path[-1]] for path in rows], dtype=torch.long,
                                 device=self.device)
        positions = torch.tensor([[size + len(path) - 1] for path in rows], dtype=torch.long,
                                 device=self.device)
        logits, cache = self._forward(_as_cache(past, self._shapes), input_ids=input_ids,
                                      position_ids=positions,
                                      attention_mask=mask)
        logprobs = torch.log_softmax(logits[:, -1].float(), dim=-1).cpu().numpy()
        new = self._stack(cache, last=1)
        computed = {}
        for i, path in enumerate(group):
            cache = torch.cat([parents[i], new[:, :, i:i + 1]], dim=4)
            computed[path] = (logprobs[i].copy(), cache)
            self._paths.put(head + path, computed[path])
        return computed

    @torch.inference_mode()
    def unsupported(self) -> str | None:
        """Why this engine cannot compute with the model (``None``: it can), from one pass of
        one token: its cache must hold keys and values (``[rows, heads, len, dim]``) for
        every layer in a plain transformers ``DynamicCache``, as attention layers keep them.
        A layer with other state (Mamba-style or convolution layers of hybrid models) is
        not: such a model fails in that pass or leaves its layers out."""
        from transformers import DynamicCache
        input_ids = torch.zeros((1, 1), dtype=torch.long, device=self.device)
        passes = self.forward_passes  # a check, not a pass to count
        try:
            _, cache = self._forward(DynamicCache(), input_ids=input_ids)
            pairs = _cache_tensors(cache)
        except Exception as e:  # noqa: BLE001 - any failure here says the same: not supported
            return f"{type(e).__name__}: {e}"
        finally:
            self.forward_passes = passes
        layers = self.model.config.get_text_config().num_hidden_layers
        if len(pairs) != layers or any(t.dim() != 4 or t.shape[2] != 1 for p in pairs for t in p):
            return f"its cache holds keys and values for {len(pairs)} of its {layers} layers"
        return None

    def _stack(self, cache: Any, last: int | None = None) -> torch.Tensor:
        """:func:`_stacked`, the shapes it padded kept for :func:`_as_cache` (one model:
        the same shapes every pass)."""
        state, self._shapes = _stacked(cache, last)
        return state

    def _forward(self, cache: Any, **inputs: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """One forward pass: its logits and key/value cache."""
        out = self.model(**inputs, **{self._cache_keyword: cache}, use_cache=True)
        self.forward_passes += 1
        returned = out.get("cache")  # transformers 5; ``past_key_values`` before
        return out.logits, returned if returned is not None else out.past_key_values

    def _chunks(self, requests: list[tuple[Tokens, int, int, Mapping[int, Iterable[str]]]],
                endings: Mapping[str, np.ndarray] | None = None) -> list[dict[int, Any]]:
        """For each ``(tokens, first, last, needs)``, what the passes give for each chunk
        ``k`` from the one holding position ``first`` to the one holding ``last``, after its
        past: with ``endings``, :class:`Sums` (holding the sets ``needs[k]`` for chunk ``k``);
        without, rows (float32 ``[len, vocabulary]``).  Found in the cache, else computed,
        ``batch`` (past, chunk) pairs a pass; the chunks before ``first`` only need their
        key/value caches, computed where they are not kept (a long line's first chunks are
        not computed again for each of its words)."""
        c = self.chunk
        spans = [self._span(tokens, first, last) for tokens, first, last, _ in requests]
        answers: list[dict[int, Any]] = [{} for _ in requests]
        begin = min((span[0] for span in spans), default=0)
        for k in range(begin, max((span[2] for span in spans), default=-1) + 1):
            work: dict[Tokens, list[Tokens]] = {}
            asked: dict[str, None] = {}
            kept: dict[tuple[Tokens, Tokens], Any] = {}  # held: the cache may drop them
            for (tokens, _, _, wanted), (start, low, last) in zip(requests, spans):
                if not start <= k <= last:
                    continue
                past, content = tokens[:k * c], tokens[k * c:(k + 1) * c]
                if k < low:     # the past of the chunks asked: only its cache is needed
                    if self._states.get(past + content) is None:
                        work.setdefault(past, []).append(content)
                    continue
                needs = tuple(wanted.get(k, ())) if endings is not None else ()
                asked.update(dict.fromkeys(needs))
                found = self._find(past, content, needs, endings is not None)
                if found is not None:
                    kept[past, content] = found
                if found is None or (
                        len(content) == c and last > k and self._states.get(past + content) is None):
                    work.setdefault(past, []).append(content)
            covering: dict[tuple[Tokens, Tokens], Tokens] = {}
            for past, contents in work.items():
                covering.update(((past, content), longer)
                                for content, longer in _covers(contents).items())
            pairs = list(dict.fromkeys((past, longer) for (past, _), longer in covering.items()))
            computed = self._compute(pairs, endings=None if endings is None else
                                     {name: endings[name] for name in asked})
            for (tokens, _, _, _), (start, low, last), found in zip(requests, spans, answers):
                if low <= k <= last:
                    past, content = tokens[:k * c], tokens[k * c:(k + 1) * c]
                    longer = covering.get((past, content))
                    found[k] = computed[past, longer] if longer is not None else kept[past, content]
        return answers

    def _span(self, tokens: Tokens, first: int, last: int) -> tuple[int, int, int]:
        """The chunks :meth:`_chunks` goes through for one request: from the first whose
        past's cache is kept, the first asked (holding position ``first``), the last (holding
        ``last``; ``-1``: none)."""
        if last < 0:
            return 0, 0, -1
        c = self.chunk
        low = max(first, 0) // c
        start = low
        while start > 0 and self._states.get(tokens[:start * c]) is None:
            start -= 1
        return start, low, last // c

    def _find(self, past: Tokens, content: Tokens, needs: tuple[str, ...] = (),
              sums: bool = False) -> Any:
        """Kept rows (or with ``sums``, :class:`Sums` holding the sets ``needs``) for
        ``content`` after ``past``, from a computed content that extends it: what a position
        gives does not depend on what follows it."""
        cache = self._sums if sums else self._rows
        for found in (cache.get((past, content)), cache.extension(past, content)):
            if found is not None and all(name in found.ends for name in needs):
                return found
        return None

    def _past_cache(self, past: Tokens) -> torch.Tensor:
        """The key/value cache of ``past`` (whole chunks, non-empty), its chunks' kept
        caches joined (a chunk's evicted one recomputed, after its own past):
        ``[layers, 2, 1, heads, len(past), dim]``.  The chunks kept grow to hold every
        chunk of ``past`` and :attr:`_least_states` more, so that a long sequence's next
        chunk does not recompute its first ones."""
        whole = self._joined.get(past)
        if whole is not None:
            return whole
        c = self.chunk
        count = len(past) // c
        self._states.size = max(self._states.size, count + self._least_states)
        pieces = []
        for k in range(count):
            piece = self._states.get(past[:(k + 1) * c])
            if piece is None:   # evicted (rare): its past's chunks are kept or come first
                self._compute([(past[:k * c], past[k * c:(k + 1) * c])])
                piece = self._states.get(past[:(k + 1) * c])
            pieces.append(piece)
        whole = torch.cat(pieces, dim=4) if count > 1 else pieces[0]
        self._joined.put(past, whole)
        return whole

    @torch.inference_mode()
    def _compute(self, pairs: list[tuple[Tokens, Tokens]], keep_state: bool = False,
                 endings: Mapping[str, np.ndarray] | None = None) -> dict[tuple[Tokens, Tokens], Any]:
        """Forward passes of ``(past, content)`` pairs (each content at most one chunk, every
        past of the same length, a whole number of chunks), ``batch`` pairs a pass whatever
        their pasts; by pair, their rows, or with ``endings`` their :class:`Sums` for these
        sets (also kept in the cache).  The key/value cache of ``past + content`` is kept
        for whole chunks, and for every content if ``keep_state``."""
        computed: dict[tuple[Tokens, Tokens], Any] = {}
        c, b = self.chunk, self.batch
        for start in range(0, len(pairs), b):
            group = pairs[start:start + b]
            rows = [list(content) + [self.pad_id] * (c - len(content)) for _, content in group]
            rows += [rows[0]] * (b - len(rows))
            input_ids = torch.tensor(rows, dtype=torch.long, device=self.device)
            logits, cache = self._forward(self._batch_cache([past for past, _ in group]),
                                          input_ids=input_ids)
            if endings is None:
                found = _split_rows(torch.log_softmax(logits.float(), dim=-1).cpu().numpy(), group)
            else:
                found = self._sums_of(logits, input_ids, group, endings)
            kept = [len(content) == c or keep_state for _, content in group]
            # the pass's own positions: [layers, 2, batch, heads, chunk, dim]
            own = self._stack(cache, last=c) if any(kept) else None
            del cache  # the model's copy of it: not two copies beside the rows' states
            for i, (past, content) in enumerate(group):
                computed[(past, content)] = found[i]
                (self._rows if endings is None else self._sums).put((past, content), found[i])
                if kept[i]:
                    self._states.put(past + content, own[:, :, i:i + 1, :, :len(content)].clone())
        return computed

    def _sums_of(self, logits: torch.Tensor, input_ids: torch.Tensor,
                 group: list[tuple[Tokens, Tokens]],
                 endings: Mapping[str, np.ndarray]) -> list[Sums]:
        """A pass's logits (``[batch, chunk, vocabulary]``, on the device) reduced there to
        :class:`Sums` for the rows of ``group``."""
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        following = logprobs[:, :-1].gather(-1, input_ids[:, 1:, None])[..., 0].cpu().numpy()
        lengths = torch.tensor([len(content) - 1 for _, content in group], device=self.device)
        last = logprobs[torch.arange(len(group), device=self.device), lengths].cpu().numpy()
        sums = {}
        if endings:
            probs = logprobs.exp_().view(-1, logprobs.shape[-1])  # in place: one array less
            sums = {name: self._log_mass(probs, logits, name, ids).view(logits.shape[:2])
                    .cpu().numpy() for name, ids in endings.items()}
        return [Sums(following[i, :len(content) - 1], last[i],
                     {name: value[i, :len(content)] for name, value in sums.items()})
                for i, (_, content) in enumerate(group)]

    def _log_mass(self, probs: torch.Tensor, logits: torch.Tensor, name: str,
                  ids: np.ndarray) -> torch.Tensor:
        """The log of the probability of the set ``name`` (token ``ids``) at each position
        of ``probs`` (``[positions, vocabulary]``): sums of :data:`MASS_BLOCK` probabilities
        times the set's 0/1 vector (float32, of one shape whatever the pass holds), added in
        float64.  One float32 sum over the whole vocabulary would drop
        the smallest terms, biased low by about 2e-5 nats for SmolLM2; these blocks stay
        within 4e-7 of the exact log-sum-exp.  Where the sum is below ``1e-20`` (float32
        underflow would lose part of it), the exact log-sum-exp of the set's
        log-probabilities (from ``logits``) instead."""
        mask = self._endings.get(name)
        if mask is None:
            mask = torch.zeros(probs.shape[-1], dtype=probs.dtype, device=self.device)
            mask[torch.as_tensor(ids, dtype=torch.long, device=self.device)] = 1.0
            self._endings.put(name, mask)
        blocks = probs.shape[-1] // MASS_BLOCK
        cut = blocks * MASS_BLOCK
        # a product into a kept buffer, then sums of its blocks: on a CPU 3x faster than
        # einsum's batched matrix-vector products, and a fresh product array each time would
        # cost as much in page faults (BENCHMARKS.md, "neural")
        shape = (probs.shape[0], blocks, MASS_BLOCK)
        if self._product is None or self._product.shape != shape:
            self._product = torch.empty(shape, dtype=probs.dtype, device=self.device)
        torch.mul(probs[:, :cut].view(shape), mask[:cut].view(blocks, MASS_BLOCK),
                  out=self._product)
        total = self._product.sum(-1).double().sum(-1)
        if cut < probs.shape[-1]:
            total += torch.mv(probs[:, cut:], mask[cut:]).double()
        small = total < 1e-20
        if not bool(small.any()):
            return total.log()
        logprobs = torch.log_softmax(logits.double(), dim=-1).view(-1, logits.shape[-1])
        exact = torch.logsumexp(logprobs.masked_fill(mask == 0, -math.inf), dim=-1)
        return torch.where(small, exact, total.log())

    def _batch_cache(self, pasts: list[Tokens]) -> Any:
        """The key/value cache of a pass whose rows follow ``pasts`` (one each, then the
        first again to fill ``batch`` rows; all of one length)."""
        from transformers import DynamicCache
        assert len({len(past) for past in pasts}) == 1, "a pass's pasts are of one length"
        if not pasts[0]:
            return DynamicCache()
        b = self.batch
        if all(past == pasts[0] for past in pasts):  # the common case: no copy
            return _as_cache(self._past_cache(pasts[0]).expand(-1, -1, b, -1, -1, -1), self._shapes)
        states = [self._past_cache(past) for past in pasts]
        return _as_cache(torch.cat(states + [states[0]] * (b - len(states)), dim=2), self._shapes)


def _split_rows(logprobs: np.ndarray, group: list[tuple[Tokens, Tokens]]) -> list[np.ndarray]:
    """Each row's log-probabilities at its content's positions (copies: the pass's array is
    not held)."""
    return [logprobs[i, :len(content)].copy() for i, (_, content) in enumerate(group)]


def _covers(contents: list[Tokens]) -> dict[Tokens, Tokens]:
    """Each distinct content -> one of ``contents`` that starts with it and is no prefix of
    another (its rows cover the shorter one's), in lexicographic order.  Sorted, a
    content's extensions follow it at once, so one pass from the end finds them: linear
    after the sort (a pass's contents after an empty past are every line's first chunk,
    thousands at a time)."""
    ordered = sorted(set(contents))
    covers: dict[Tokens, Tokens] = {}
    after: Tokens | None = None
    for content in reversed(ordered):
        extended = after is not None and after[:len(content)] == content
        covers[content] = covers[after] if extended else content
        after = content
    return dict(reversed(covers.items()))
