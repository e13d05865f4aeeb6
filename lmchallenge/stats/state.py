"""Summary statistics of LM Challenge logs (``lmc stats``), from mergeable states.

Every statistic of LM Challenge 5.x (docs/statistics.md,
"lmc stats") is computed from a :class:`StatsState`: ``update(datum)`` feeds one log datum,
``merge(other)`` adds another state, :meth:`StatsState.result` gives the numbers. Merging
the states of a log's pieces, in any grouping, gives exactly the state of one pass over the
whole log (docs/architecture.md, invariant 4): counts are integers, sums of floats are kept exactly
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
of the fitted mixture, see :mod:`lmchallenge.stats.reranking`).

Human statistics (default) divide these: ``messages_per_user``, ``tokens_per_user``,
``characters_per_token``, ``skipped`` (fraction of all tokens), ``prediction.hitN`` (Hit@N)
and ``prediction.mrr`` (mean reciprocal rank) over selected tokens, ``completion.characters``
(keystroke savings: fraction of characters) and ``completion.tokens``, ``entropy.mean``
(cross-entropy in nats per scored token) and ``entropy.hit`` (fraction scored),
``reranking.accuracy`` and ``reranking.base_accuracy`` (Hit@1 after and before reranking).
Asked for (``extensions``, ``lmc stats --derived``), and not in 5.x:
``reranking.accuracy_at_least_base``, Hit@1 of the best of the 5.x fit, a fit started from the
error model alone, and the error model alone (raw ``correct_at_least_base``).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lmchallenge.stats import reranking
from lmchallenge.stats.results import RawStats, Stats
from lmchallenge.stats.outcomes import NEXT_WORD_RANKS, completion_start, rank_of
from lmchallenge.errors import InputError
from lmchallenge.logs.jsonl import parse_jsonlines
from lmchallenge.logs.schema import Datum


MASK32 = 0xFFFFFFFF
COMBINE = 48677   # multiplier combining column hashes (LM Challenge 5.x fingerprint)
INT_FACTOR = 50123
NULL_HASH = 49307
_SCALE_BITS = 1127  # every finite double is an integer multiple of 2**-1127 (1074 + 53)


# --- fingerprint ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=1 << 16)  # users and words repeat: most tokens hit the cache
def string_hash(value: str) -> int:
    """The column hash of a string: the first 8 bytes of its UTF-8 MD5, little-endian."""
    return int.from_bytes(hashlib.md5(value.encode("utf-8")).digest()[:8], "little")


def column_hash(value: Any) -> int:
    """The column hash of a fingerprinted value (str, int or None).

    Raises:
        TypeError: any other type (a bool too: ``true`` is not the user ``1``).
    """
    if isinstance(value, str):
        return string_hash(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return INT_FACTOR * value
    if value is None:
        return NULL_HASH
    raise TypeError(f"cannot fingerprint a {type(value).__name__}")


def datum_hash(datum: Datum) -> int:
    """The 32-bit hash of a datum's ``user``, ``message``, ``token`` and ``target``, as the
    LM Challenge 5.x fingerprint defines it (order-invariant once summed modulo 2**32)."""
    h = 0
    for key in ("user", "message", "token", "target"):
        h = h * COMBINE + column_hash(datum.get(key))
    return h & MASK32


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
        """The correctly rounded sum (± infinity beyond the largest float, as a float sum
        gives: 4 scores of -1e308 sum to -inf)."""
        try:
            exact = self.scaled / (1 << _SCALE_BITS)
        except OverflowError:
            exact = math.inf if self.scaled > 0 else -math.inf
        return exact + self.nonfinite


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
        if not isinstance(target, str):
            raise TypeError(f"target is {target!r}, not a string")
        user = datum.get("user")
        h = datum_hash(datum)
        self.tokens += 1
        self.characters += len(target)
        self.users.update(user)
        self.messages.update((user, datum.get("message")))
        self.fingerprint = (self.fingerprint + h) & MASK32
        completions = datum.get("completions")
        if completions is not None:
            self._update_completions(completions, target)
        logp = datum.get("logp")
        if logp is not None:
            self.entropy_sum.add(-reranking.checked_score(logp, "logp"))
            self.entropy_tokens += 1
            self.entropy_fingerprint = (self.entropy_fingerprint + h) & MASK32
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
        self.fingerprint = (self.fingerprint + other.fingerprint) & MASK32
        self.srr.merge(other.srr)
        self.predicted += other.predicted
        for n in NEXT_WORD_RANKS:
            self.hits[n] += other.hits[n]
        self.completion_characters += other.completion_characters
        self.completion_tokens += other.completion_tokens
        self.entropy_sum.merge(other.entropy_sum)
        self.entropy_tokens += other.entropy_tokens
        self.entropy_fingerprint = (self.entropy_fingerprint + other.entropy_fingerprint) & MASK32
        self.scores.merge(other.scores)
        return self

    def summary(self) -> "StatsState":
        """A copy without the ``wr`` score matrices (small: safe to send anywhere)."""
        return replace(self, users=replace(self.users), messages=replace(self.messages),
                       srr=replace(self.srr), hits=dict(self.hits),
                       entropy_sum=replace(self.entropy_sum), scores=reranking.ScoreMatrices())

    def raw(self, fit: reranking.RerankingFit | None = None, extensions: bool = False) -> RawStats:
        """The raw statistics (``lmc stats --no-human``).

        Args:
            fit: the reranking fit, when it was made elsewhere (distributed); by default it
                is made here on :attr:`scores`.
            extensions: also the figures LM Challenge 5.x does not print
                (``reranking.correct_at_least_base``); without, exactly 5.x's fields.
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
            if extensions:
                rerank["correct_at_least_base"] = fit.correct_at_least_base
        return dict(
            skipped=self.skipped, users=self.users.count, messages=self.messages.count,
            tokens=self.tokens, characters=self.characters, fingerprint=self.fingerprint,
            prediction=prediction,
            completion=dict(characters=self.completion_characters, tokens=self.completion_tokens),
            entropy=dict(sum=self.entropy_sum.value() if self.entropy_tokens else 0, tokens=self.entropy_tokens,
                         fingerprint=self.entropy_fingerprint),
            reranking=rerank,
        )

    def result(self, human: bool = True, fit: reranking.RerankingFit | None = None,
               extensions: bool = False) -> Stats | RawStats:
        """The statistics: :func:`humanize` d (default) or raw (``fit`` and ``extensions`` as
        for :meth:`raw`)."""
        raw = self.raw(fit, extensions)
        return humanize(raw) if human else raw


def humanize(stats: RawStats) -> Stats:
    """Human statistics from raw ones, ``stats`` (as ``stats(log, human=False)`` gives them;
    the argument has LM Challenge 5.x's name); see the module docstring for each field.

    Groups (``prediction``, ``completion``, ``entropy``, ``reranking``) appear only when
    the log has data for them; per-user and per-token ratios only when there are selected
    tokens.
    """
    raw = stats
    tokens, users = raw["tokens"], raw["users"]
    human: Stats = {"fingerprint": format_fingerprint(raw["fingerprint"]), "users": users}
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
        if "correct_at_least_base" in rerank:
            human["reranking"]["accuracy_at_least_base"] = rerank["correct_at_least_base"] / tokens
    return human


def state_of_lines(lines: Iterable[str], path: str, first_line: int = 1, groups: Any = None) -> StatsState:
    """The state of jsonlines log lines, datum by datum.

    Args:
        lines: text lines of a jsonlines log (blank ones are skipped).
        path: the log's name, for errors.
        first_line: the line number of the first of ``lines``.
        groups: as for :func:`state_of_log`.
    Raises:
        InputError: naming ``path`` and the line that is not JSON or not a log datum.
    """
    return state_of_numbered(parse_jsonlines(lines, path, first_line), path, groups)


def state_of_numbered(numbered: Iterable[tuple[int, Datum]], path: str, groups: Any = None) -> StatsState:
    state = StatsState()
    for number, datum in numbered:
        try:
            state.update(datum)
            if groups is not None:
                groups.update(datum)
        except (KeyError, TypeError, AttributeError, ValueError, IndexError) as e:
            from lmchallenge.logs.check import problem

            found = problem(datum)     # as lmc validate says it (a bool user: 'cannot fingerprint')
            reason = f": {found}" if found else f" ({type(e).__name__}: {e})"
            raise InputError(path, number, f"not an LM Challenge log datum{reason}") from None
    return state
