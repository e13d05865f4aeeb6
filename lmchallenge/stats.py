"""Summary statistics of LM Challenge logs (``lmc stats``), from mergeable states.

Every statistic of LM Challenge 5.x (the 5.x README, ``../shared/seeds/004_f8d502719510d365.txt``,
"lmc stats") is computed from a :class:`StatsState`: ``update(datum)`` feeds one log datum,
``merge(other)`` adds another state, :meth:`StatsState.result` gives the numbers. Merging
the states of a log's pieces, in any grouping, gives exactly the state of one pass over the
whole log (DESIGN.md invariant 4): counts are integers, sums of floats are kept exactly
(:class:`ExactSum`) and rounded once at the end, the fingerprint is a sum modulo 2**32,
and users/messages are counted as runs of consecutive equal keys with the pieces' first
and last keys remembered.

Raw statistics (``--no-human``), as 5.x names them: ``users``, ``messages``, ``tokens``,
``characters`` (of selected tokens), ``skipped`` (unselected tokens), ``fingerprint``
(32-bit hash of user/message/token/target), ``prediction`` (``srr`` = sum of reciprocal
ranks, ``hit`` = tokens whose target is anywhere in the next-word predictions,
``hitN`` = target at rank <= N), ``completion`` (``characters`` saved and ``tokens``
completed from a prefix, target within the top 2), ``entropy`` (``sum`` of -logp in nats
(logp are natural logarithms as the models report them), scored ``tokens``, and their own
``fingerprint``), ``reranking`` (``max_candidates``, ``base_correct``, ``correct``, ``args``
of the fitted mixture, see :mod:`lmchallenge.reranking`).

Human statistics (default) divide these: ``messages_per_user``, ``tokens_per_user``,
``characters_per_token``, ``skipped`` (fraction of all tokens), ``prediction.hitN`` (Hit@N)
and ``prediction.mrr`` (mean reciprocal rank) over selected tokens, ``completion.characters``
(keystroke savings: fraction of characters) and ``completion.tokens``, ``entropy.mean``
(cross-entropy in nats per scored token) and ``entropy.hit`` (fraction scored),
``reranking.accuracy`` and ``reranking.base_accuracy`` (Hit@1 after and before reranking).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import itertools
import math
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import click

from . import reranking
from .exceptions import InputError
from .log import is_parquet_name, parse_jsonlines, read_log, run_dir_parts

Datum = dict[str, Any]

NEXT_WORD_RANKS = (1, 3, 10, 20)
"""Hit@N is reported for these N."""

COMPLETION_MAX_RANK = 2
"""A prefix completion counts when the rest of the word is among the first two completions."""

_MASK32 = 0xFFFFFFFF
_COMBINE = 48677   # multiplier combining column hashes (LM Challenge 5.x fingerprint)
_INT_FACTOR = 50123
_NULL_HASH = 49307
_SCALE_BITS = 1127  # every finite double is an integer multiple of 2**-1127 (1074 + 53)


# --- fingerprint ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=1 << 16)  # users and words repeat: most tokens hit the cache
def string_hash(value: str) -> int:
    """The column hash of a string: the first 8 bytes of its UTF-8 MD5, little-endian."""
    return int.from_bytes(hashlib.md5(value.encode("utf-8")).digest()[:8], "little")


def column_hash(value: Any) -> int:
    """The column hash of a fingerprinted value (str, int/bool or None).

    Raises:
        TypeError: any other type.
    """
    if isinstance(value, str):
        return string_hash(value)
    if isinstance(value, (bool, int)):
        return _INT_FACTOR * int(value)
    if value is None:
        return _NULL_HASH
    raise TypeError(f"cannot fingerprint a {type(value).__name__}")


def datum_hash(datum: Datum) -> int:
    """The 32-bit hash of a datum's ``user``, ``message``, ``token`` and ``target``, as the
    LM Challenge 5.x fingerprint defines it (order-invariant once summed modulo 2**32)."""
    h = 0
    for key in ("user", "message", "token", "target"):
        h = h * _COMBINE + column_hash(datum.get(key))
    return h & _MASK32


def format_fingerprint(value: int) -> str:
    """A fingerprint as 8 lower-case hex digits."""
    return f"{value:08x}"


# --- mergeable pieces ----------------------------------------------------------------------

@dataclass
class ExactSum:
    """An exact sum of floats (as an integer multiple of 2**-1127), rounded once by
    :meth:`value`, so the result does not depend on order or grouping. Non-finite values
    are summed separately as floats."""

    scaled: int = 0
    nonfinite: float = 0.0

    def add(self, x: float) -> None:
        if math.isfinite(x):
            numerator, denominator = x.as_integer_ratio()
            self.scaled += numerator << (_SCALE_BITS - denominator.bit_length() + 1)
        else:
            self.nonfinite += x

    def add_array(self, values: Any) -> None:
        """Add every element of a float64 array exactly (vectorised by exponent)."""
        import numpy as np

        values = np.asarray(values, dtype=np.float64)
        finite = np.isfinite(values)
        if not finite.all():
            self.nonfinite += float(values[~finite].sum())
            values = values[finite]
        if not len(values):
            return
        mantissa, exponent = np.frexp(values)
        integers = (mantissa * 2.0 ** 53).astype(np.int64)   # exact: |mantissa| < 1
        high, low = integers >> 26, integers & ((1 << 26) - 1)
        lowest = int(exponent.min())  # distinct exponents by counting (np.unique imports numpy.ma)
        for e in np.flatnonzero(np.bincount(exponent - lowest)) + lowest:
            chosen = exponent == e
            total = (int(high[chosen].sum()) << 26) + int(low[chosen].sum())
            self.scaled += total << (int(e) - 53 + _SCALE_BITS)

    def merge(self, other: "ExactSum") -> None:
        self.scaled += other.scaled
        self.nonfinite += other.nonfinite

    def value(self) -> float:
        """The correctly rounded sum."""
        return self.scaled / (1 << _SCALE_BITS) + self.nonfinite


@dataclass
class RunCount:
    """Counts runs of consecutive equal keys (users, or (user, message) pairs), as
    LM Challenge 5.x counts users and messages; mergeable by remembering the first and
    last key (a run crossing the boundary of two pieces counts once)."""

    count: int = 0
    first: Any = None
    last: Any = None

    def update(self, key: Any) -> None:
        if self.count == 0:
            self.first = key
            self.count = 1
        elif key != self.last:
            self.count += 1
        self.last = key

    def merge(self, other: "RunCount") -> None:
        if other.count == 0:
            return
        if self.count == 0:
            self.count, self.first = other.count, other.first
        else:
            self.count += other.count - (other.first == self.last)
        self.last = other.last


def rank_of(items: Sequence[str], item: str, max_rank: int | None = None) -> int | None:
    """1-based rank of ``item`` among ``items`` (looking at the first ``max_rank`` only),
    or None."""
    try:
        return items.index(item, 0, len(items) if max_rank is None else max_rank) + 1
    except ValueError:
        return None


def completion_start(completions: Sequence[Sequence[str]], target: str) -> int | None:
    """The first prefix length at which the rest of ``target`` is among the first
    :data:`COMPLETION_MAX_RANK` completions, or None."""
    for start, candidates in enumerate(completions):
        if rank_of(candidates, target[start:], COMPLETION_MAX_RANK) is not None:
            return start
    return None


# --- the state -----------------------------------------------------------------------------

def _zero_hits() -> dict[int, int]:
    return {n: 0 for n in NEXT_WORD_RANKS}


@dataclass
class StatsState:
    """The mergeable state of every ``lmc stats`` statistic of (a piece of) a log.

    Counts are over selected datums (``select`` missing or true) except ``skipped``.
    ``scores`` holds the ``wr`` score matrices (the largest part: see :meth:`summary`).
    """

    skipped: int = 0
    tokens: int = 0
    characters: int = 0
    users: RunCount = field(default_factory=RunCount)
    messages: RunCount = field(default_factory=RunCount)
    fingerprint: int = 0
    srr: ExactSum = field(default_factory=ExactSum)
    predicted: int = 0
    hits: dict[int, int] = field(default_factory=_zero_hits)
    completion_characters: int = 0
    completion_tokens: int = 0
    entropy_sum: ExactSum = field(default_factory=ExactSum)
    entropy_tokens: int = 0
    entropy_fingerprint: int = 0
    scores: reranking.ScoreMatrices = field(default_factory=reranking.ScoreMatrices)

    @property
    def rows(self) -> int:
        """Datums seen, selected or not."""
        return self.tokens + self.skipped

    def update(self, datum: Datum) -> None:
        """Feed one log datum."""
        if not datum.get("select", True):
            self.skipped += 1
            return
        target = datum["target"]
        user = datum.get("user")
        h = datum_hash(datum)
        self.tokens += 1
        self.characters += len(target)
        self.users.update(user)
        self.messages.update((user, datum.get("message")))
        self.fingerprint = (self.fingerprint + h) & _MASK32
        completions = datum.get("completions")
        if completions is not None:
            self._update_completions(completions, target)
        logp = datum.get("logp")
        if logp is not None:
            self.entropy_sum.add(-float(logp))
            self.entropy_tokens += 1
            self.entropy_fingerprint = (self.entropy_fingerprint + h) & _MASK32
        results = datum.get("results")
        if results is not None:
            self.scores.add(*reranking.target_first(target, results))

    def _update_completions(self, completions: Sequence[Sequence[str]], target: str) -> None:
        rank = rank_of(completions[0], target) if completions else None
        if rank is not None:
            self.srr.add(1 / rank)
            self.predicted += 1
            for n in NEXT_WORD_RANKS:
                self.hits[n] += rank <= n
        start = completion_start(completions, target)
        if start is not None:
            self.completion_characters += len(target) - start
            self.completion_tokens += 1

    def merge(self, other: "StatsState") -> "StatsState":
        """Add ``other`` (the state of the datums that follow this state's) in place;
        returns self."""
        self.skipped += other.skipped
        self.tokens += other.tokens
        self.characters += other.characters
        self.users.merge(other.users)
        self.messages.merge(other.messages)
        self.fingerprint = (self.fingerprint + other.fingerprint) & _MASK32
        self.srr.merge(other.srr)
        self.predicted += other.predicted
        for n in NEXT_WORD_RANKS:
            self.hits[n] += other.hits[n]
        self.completion_characters += other.completion_characters
        self.completion_tokens += other.completion_tokens
        self.entropy_sum.merge(other.entropy_sum)
        self.entropy_tokens += other.entropy_tokens
        self.entropy_fingerprint = (self.entropy_fingerprint + other.entropy_fingerprint) & _MASK32
        self.scores.merge(other.scores)
        return self

    def summary(self) -> "StatsState":
        """A copy without the ``wr`` score matrices (small: safe to send anywhere)."""
        return replace(self, users=replace(self.users), messages=replace(self.messages),
                       srr=replace(self.srr), hits=dict(self.hits),
                       entropy_sum=replace(self.entropy_sum), scores=reranking.ScoreMatrices())

    def raw(self, fit: reranking.RerankingFit | None = None) -> dict[str, Any]:
        """The raw statistics (``lmc stats --no-human``).

        Args:
            fit: the reranking fit, when it was made elsewhere (distributed); by default it
                is made here on :attr:`scores`.
        """
        if fit is None:
            fit = reranking.fit(self.scores)
        # an empty sum is the integer 0, as LM Challenge 5.x prints it
        prediction = {"srr": self.srr.value() if self.predicted else 0, "hit": self.predicted}
        prediction.update({f"hit{n}": self.hits[n] for n in NEXT_WORD_RANKS})
        if fit.model is None:
            # LM Challenge 5.x names the base count "already_correct" when there is no wr data
            rerank: dict[str, Any] = dict(max_candidates=0, already_correct=0, correct=0, args=None)
        else:
            rerank = dict(max_candidates=fit.max_candidates, base_correct=fit.base_correct,
                          correct=fit.correct, args=fit.model.args)
        return dict(
            skipped=self.skipped, users=self.users.count, messages=self.messages.count,
            tokens=self.tokens, characters=self.characters, fingerprint=self.fingerprint,
            prediction=prediction,
            completion=dict(characters=self.completion_characters, tokens=self.completion_tokens),
            entropy=dict(sum=self.entropy_sum.value() if self.entropy_tokens else 0, tokens=self.entropy_tokens,
                         fingerprint=self.entropy_fingerprint),
            reranking=rerank,
        )

    def result(self, human: bool = True, fit: reranking.RerankingFit | None = None) -> dict[str, Any]:
        """The statistics: :func:`humanize` d (default) or raw."""
        raw = self.raw(fit)
        return humanize(raw) if human else raw


def humanize(raw: dict[str, Any]) -> dict[str, Any]:
    """Human statistics from raw ones (see the module docstring for each field).

    Groups (``prediction``, ``completion``, ``entropy``, ``reranking``) appear only when
    the log has data for them; per-user and per-token ratios only when there are selected
    tokens.
    """
    tokens, users = raw["tokens"], raw["users"]
    human: dict[str, Any] = {"fingerprint": format_fingerprint(raw["fingerprint"]), "users": users}
    if users:
        human["messages_per_user"] = raw["messages"] / users
        human["tokens_per_user"] = tokens / users
    if tokens:
        human["characters_per_token"] = raw["characters"] / tokens
    total = raw["skipped"] + tokens
    human["skipped"] = raw["skipped"] / total if total else 0.0
    prediction = raw["prediction"]
    if prediction["hit"]:
        human["prediction"] = {("mrr" if k == "srr" else k): v / tokens for k, v in prediction.items()}
    completion = raw["completion"]
    if completion["tokens"]:
        human["completion"] = dict(characters=completion["characters"] / raw["characters"],
                                   tokens=completion["tokens"] / tokens)
    entropy = raw["entropy"]
    if entropy["tokens"]:
        human["entropy"] = dict(fingerprint=format_fingerprint(entropy["fingerprint"]),
                                hit=entropy["tokens"] / tokens,
                                mean=entropy["sum"] / entropy["tokens"])
    rerank = raw["reranking"]
    if rerank["max_candidates"]:
        human["reranking"] = dict(accuracy=rerank["correct"] / tokens,
                                  base_accuracy=rerank["base_correct"] / tokens,
                                  max_candidates=rerank["max_candidates"])
    return human


def state_of(data: Iterable[Datum]) -> StatsState:
    """One pass of :class:`StatsState` over ``data``."""
    state = StatsState()
    for datum in data:
        state.update(datum)
    return state


def stats(data: Iterable[Datum], human: bool = True) -> dict[str, Any]:
    """The ``lmc stats`` statistics of a log.

    Args:
        data: log datums (LM Challenge 5.x schema); unselected ones are counted as skipped.
        human: ratios (default) or raw sums.
    Returns:
        A dict as ``lmc stats`` prints it (without the ``log`` key).
    """
    return state_of(data).result(human=human)


def state_of_log(path: str, lines: int | None = None) -> StatsState:
    """The state of a whole log (any form :func:`lmchallenge.log.read_log` reads).

    Read column-wise: Parquet files (:mod:`lmchallenge.columnar`) and jsonlines logs,
    gzipped or from stdin (:mod:`lmchallenge.columnar_jsonl`); a run directory part by
    part, merging the parts' states.  With ``lines``, datum by datum.

    Args:
        path: the log.
        lines: only the first ``lines`` datums (None: all).
    Raises:
        InputError: the log cannot be read, or a datum is not a log datum (naming the file
            and the line of a jsonlines log; with ``lines``, datum N counted from 1).
    """
    from . import columnar

    if lines is not None:
        return _state_of_numbered(enumerate(itertools.islice(read_log(path), lines), start=1), path)
    if columnar.is_columnar(path):
        return columnar.state_of_parquet(path)
    if path != "-" and os.path.isdir(path):
        state = StatsState()
        for part in run_dir_parts(path):
            state.merge(state_of_log(str(part)))
        return state
    if is_parquet_name(path):
        return columnar.state_of_parquet(path)    # raises the InputError of a missing file
    from .columnar_jsonl import state_of_jsonl

    return state_of_jsonl(path)


def state_of_lines(lines: Iterable[str], path: str, first_line: int = 1) -> StatsState:
    """The state of jsonlines log lines, datum by datum.

    Args:
        lines: text lines of a jsonlines log (blank ones are skipped).
        path: the log's name, for errors.
        first_line: the line number of the first of ``lines``.
    Raises:
        InputError: naming ``path`` and the line that is not JSON or not a log datum.
    """
    return _state_of_numbered(parse_jsonlines(lines, path, first_line), path)


def _state_of_numbered(numbered: Iterable[tuple[int, Datum]], path: str) -> StatsState:
    state = StatsState()
    for number, datum in numbered:
        try:
            state.update(datum)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise InputError(path, number, f"not an LM Challenge log datum ({type(e).__name__}: "
                             f"{e}); lmc validate tells what is wrong") from None
    return state


# --- command line --------------------------------------------------------------------------

FIRST_CSV_COLUMNS = ("log", "fingerprint", "users", "messages_per_user", "tokens_per_user",
                     "characters_per_token", "skipped")


def flatten(nested: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    flat: dict[str, Any] = {}
    for key, value in nested.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def to_json(rows: list[dict[str, Any]]) -> str:
    """One JSON object per line, keys sorted."""
    import json

    return "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)


def to_csv(rows: list[dict[str, Any]]) -> str:
    """CSV with the columns of the first row: the general ones first, then the rest sorted."""
    flat = [flatten(row) for row in rows]
    order = {name: i for i, name in enumerate(FIRST_CSV_COLUMNS)}
    columns = sorted(flat[0], key=lambda c: (order.get(c, len(order)), c)) if flat else []
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    writer.writerows(flat)
    return out.getvalue()


OUTPUTS: dict[str, Callable[[list[dict[str, Any]]], str]] = {"json": to_json, "csv": to_csv}


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3     # glibc's mallopt parameters (malloc.h)


def _tune_for_a_short_process() -> None:
    """Settings for ``lmc stats``, a process that exits when its statistics are printed.

    * No linear algebra is done: one OpenBLAS thread, so that importing NumPy does not
      start (and busy-wait) a BLAS thread per core beside the Parquet decoding thread.
    * The column-wise reduction allocates and frees NumPy arrays of every batch.  By
      default glibc hands freed memory back to the kernel at once (trim and mmap
      thresholds of 128 KiB and up), so each batch faults in (and zeroes) fresh pages
      again: 14,000 of the 24,000 page faults of a 1,000,000-row Parquet log.  The memory
      is kept instead (mallopt(3)); nothing changes where the C library is not glibc.
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import ctypes     # already imported (by NumPy, which lmchallenge.reranking imports)

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)       # glibc's largest


@click.command("stats")
@click.argument("log", nargs=-1)
@click.option("-v", "--verbose", count=True, help="More detail on stderr.")
@click.option("-n", "--lines", type=click.IntRange(0), help="Only the first N datums of each log.")
@click.option("-o", "--output", type=click.Choice(sorted(OUTPUTS)), default="json",
              show_default=True, help="Output format.")
@click.option("-h/-H", "--human/--no-human", default=True,
              help="Ratios (default) or raw sums.")
def cli(log: tuple[str, ...], verbose: int, lines: int | None, output: str, human: bool) -> None:
    """Summary statistics of one or more logs (.jsonl, .jsonl.gz, .parquet, an lmc-dist run
    directory, or - / nothing for stdin), one row per log."""
    from .verbosity import set_verbosity

    set_verbosity(verbose)
    _tune_for_a_short_process()
    rows = [dict(log=path, **state_of_log(path, lines).result(human=human)) for path in log or ("-",)]
    sys.stdout.write(OUTPUTS[output](rows))
