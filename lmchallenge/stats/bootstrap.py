"""Bootstrap intervals and paired tests of ``lmc stats`` figures, from per-group sums.

Tokens of one user are correlated (one user's vocabulary, one model state), so the unit of
resampling is the **group**: a user, or, for a token whose ``user`` is null (plain text),
its message.  Each group is summarised by additive sufficient statistics
(:data:`COLUMNS`); every figure with an interval is a ratio of two column totals
(:data:`METRICS`), e.g. Hit@1 = ``sum(hit1) / sum(tokens)``.  So the state of a log is one
row of sums per group (:class:`GroupSums`), it merges by adding rows of equal keys (a
partition's state merges with the others', DESIGN.md invariant 4), and a bootstrap
resample is a vector of multinomial group counts ``w``: statistic ``(w @ S[:, num]) /
(w @ S[:, den])``.

Intervals (:func:`intervals`): the nonparametric bootstrap over groups (Efron &
Tibshirani 1993, *An Introduction to the Bootstrap*, ch. 13 percentile and ch. 14 BCa),
``resamples`` draws from a seeded :class:`numpy.random.Generator` (PCG64), in blocks of
independent streams that large tables draw on several threads (:func:`resampled_totals`).  The
default is the **percentile** interval (``[q(a/2), q(1 - a/2)]`` of the resampled
statistic, linear interpolation as :func:`numpy.quantile`); ``method="bca"`` gives the
bias-corrected and accelerated interval, with the acceleration from the leave-one-group-out
jackknife (cheap: each leave-one-out total is the total minus one row).

Paired comparison (:func:`paired`): both logs are resampled with the *same* group counts,
giving the difference's interval and a two-sided p-value of "no difference" from the
bootstrap distribution shifted to the null (Hall & Wilson 1991, "Two guidelines for
bootstrap hypothesis testing", Biometrics 47): ``p = (1 + #{|d_b - d| >= |d|}) /
(1 + B)``.  :func:`randomised` is the approximate randomisation test (Noreen 1989; as
sacrebleu's ``--paired-ar``): each group's sums are swapped between the two logs with
probability 1/2, ``p = (1 + #{|d_r| >= |d|}) / (1 + R)``.  Both give ``p = 1`` for a log
compared with itself (every difference is 0, and ``0 >= 0``).

``wr`` accuracy is not a ratio of sums: the mixture ``(alpha, beta)`` is fitted on all the
tokens (:mod:`lmchallenge.stats.reranking`).  Its interval here is that of the accuracy *at the
fitted parameters* (the per-group count of tokens correct under the one global fit): the
mixture is not refitted on each resample (that would be a Nelder-Mead fit per resample),
so the interval leaves out the fit's own variability and is, if anything, narrow.  The
``base_accuracy`` (error model alone) has no fitted parameter and its interval is exact
in this sense.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Hashable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from lmchallenge.stats import reranking
from lmchallenge.stats.outcomes import NEXT_WORD_RANKS, completion_start, rank_of

COLUMNS: tuple[str, ...] = (
    "tokens", "characters", "keystrokes", "predicted", *(f"hit{n}" for n in NEXT_WORD_RANKS), "srr",
    "completion_characters", "completion_tokens", "entropy_sum", "entropy_tokens",
    "base_correct", "correct")
"""The additive per-group sums, over selected tokens: ``tokens``, ``characters`` (of the
targets), ``predicted`` (target among the next-word predictions), ``hitN`` (at rank <= N),
``srr`` (sum of reciprocal ranks), ``completion_characters`` (characters saved) and
``completion_tokens``, ``entropy_sum`` (sum of -logp, nats) and ``entropy_tokens``
(scored), ``keystrokes`` (``characters + tokens``: the keystrokes of typing every word
and a space after it, :func:`lmchallenge.stats.derived` KSR), ``base_correct`` and ``correct`` (``wr`` Hit@1 by the error model alone / under
the fitted mixture)."""

COLUMN = {name: i for i, name in enumerate(COLUMNS)}

METRICS: tuple[tuple[str, str, str], ...] = (
    ("prediction.hit", "predicted", "tokens"),
    *((f"prediction.hit{n}", f"hit{n}", "tokens") for n in NEXT_WORD_RANKS),
    ("prediction.mrr", "srr", "tokens"),
    ("completion.characters", "completion_characters", "characters"),
    ("completion.tokens", "completion_tokens", "tokens"),
    ("completion.ksr", "completion_characters", "keystrokes"),
    ("entropy.hit", "entropy_tokens", "tokens"),
    ("entropy.mean", "entropy_sum", "entropy_tokens"),
    ("reranking.accuracy", "correct", "tokens"),
    ("reranking.base_accuracy", "base_correct", "tokens"),
)
"""``(key path in the human lmc stats output, numerator column, denominator column)``;
``completion.ksr`` (keystroke savings rate, :mod:`lmchallenge.stats.derived`) is not in the
reference output: it is reported only where derived figures are asked for."""

DERIVED = ("completion.ksr",)

CHUNK_CELLS = 1 << 22
"""Swap indicators of :func:`randomised` held at once (int64 + float64: about 64 MiB)."""

METHODS = ("percentile", "bca")

GroupKey = Hashable
"""A group: the user (a string or an integer, as the log gives it), or ``(None, message)``
for the tokens of a message without user; ``(user, message)`` where groups are messages."""

_FLUSH_ROWS = 4096
FEW_GROUPS = 20
"""Below this many groups an interval is logged as rough (the bootstrap distribution of a
handful of users has a handful of distinct values)."""
MIN_RESAMPLES = 2
"""Fewer resamples give an interval of width 0, which would pass for certainty."""
MAX_RESAMPLES = 1_000_000
"""An interval holds every resample's column totals (float64 ``[resamples, len(COLUMNS)]``,
about 150 MB at this many, twice that in ``lmc compare``): more would only exhaust memory
(QA: ``--resamples 100000000`` asked for 11 GiB and ended in a traceback)."""
TAIL_RESAMPLES = 10
"""Resamples wanted beyond each endpoint of an interval (:func:`few_resamples`): 25 at the
default 0.95 and 1,000 resamples."""
LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    """How intervals are computed.

    Attributes:
        confidence: the nominal coverage, in (0, 1).
        resamples: bootstrap resamples (or randomisation trials).
        seed: seed of the numpy Generator (PCG64).
        method: ``"percentile"`` or ``"bca"``.
    """

    confidence: float = 0.95
    resamples: int = 1000
    seed: int = 12345
    method: str = "percentile"


def user_order(user: str | int | None) -> tuple[int, Any]:
    """A sort key of users: no user first, then strings, then integers (``1`` and ``"1"``
    are different users), each in their own order."""
    if user is None:
        return (0, 0)
    return (1, user) if isinstance(user, str) else (2, user)


def _sort_key(key: GroupKey) -> tuple[int, Any, int]:
    """Users first, then messages: ``(user, message)``, those without user first."""
    if isinstance(key, tuple):
        return (1, user_order(key[0]), key[1])
    return (0, user_order(key), 0)


@dataclass
class GroupTable:
    """Per-group sums, groups in a canonical order (users sorted, then message numbers).

    Attributes:
        keys: the groups (``len G``).
        sums: float64 ``[G, len(COLUMNS)]``.
    """

    keys: list[GroupKey]
    sums: np.ndarray

    def totals(self) -> np.ndarray:
        """Column totals, float64 ``[len(COLUMNS)]``."""
        return self.sums.sum(axis=0)

    def aligned(self, keys: Sequence[GroupKey]) -> "GroupTable":
        """The rows of ``keys`` in that order (groups absent here are zero rows)."""
        where = {k: i for i, k in enumerate(self.keys)}
        sums = np.zeros((len(keys), len(COLUMNS)))
        for i, key in enumerate(keys):
            j = where.get(key)
            if j is not None:
                sums[i] = self.sums[j]
        return GroupTable(list(keys), sums)


@dataclass
class GroupSums:
    """The mergeable per-group sums of (a piece of) a log.

    Fed datum by datum (:meth:`update`) or by record batches of the column-wise reader
    (:meth:`add_rows`); :meth:`merge` adds another piece; :meth:`finish` counts the ``wr``
    tokens correct under the fitted mixture; :meth:`table` gives the sums.  The ``wr``
    score rows are kept (float32, as :class:`lmchallenge.stats.reranking.ScoreMatrices` keeps
    them) until :meth:`finish`.

    Attributes:
        by_message: groups are messages, keyed ``(user, message)``, instead of users
            (for slices by message length).
    """

    by_message: bool = False
    index: dict[GroupKey, int] = field(default_factory=dict)
    _sums: np.ndarray = field(default_factory=lambda: np.zeros((64, len(COLUMNS))))
    _pending_keys: list[GroupKey] = field(default_factory=list)
    _pending: list[list[float]] = field(default_factory=list)
    _wr_groups: list[np.ndarray] = field(default_factory=list)
    _wr_scores: reranking.ScoreMatrices = field(default_factory=reranking.ScoreMatrices)
    _wr_pending: list[GroupKey] = field(default_factory=list)

    # --- feeding ---------------------------------------------------------------------------

    def _ids(self, keys: Iterable[GroupKey]) -> np.ndarray:
        ids = []
        for key in keys:
            i = self.index.get(key)
            if i is None:
                i = self.index[key] = len(self.index)
            ids.append(i)
        if len(self.index) > len(self._sums):
            grown = np.zeros((max(len(self.index), 2 * len(self._sums)), len(COLUMNS)))
            grown[:len(self._sums)] = self._sums
            self._sums = grown
        return np.asarray(ids, dtype=np.int64)

    def _add(self, keys: Sequence[GroupKey], local: np.ndarray, rows: np.ndarray) -> None:
        """Add ``rows`` (float64 ``[N, len(COLUMNS)]``) whose groups are ``keys[local]``."""
        ids = self._ids(keys)
        sums = np.zeros((len(keys), len(COLUMNS)))
        for j in range(len(COLUMNS)):
            sums[:, j] = np.bincount(local, weights=rows[:, j], minlength=len(keys))
        self._sums[ids] += sums

    def update(self, datum: dict[str, Any]) -> None:
        """Feed one log datum (unselected ones are ignored), as
        :meth:`lmchallenge.stats.StatsState.update` counts it."""
        if not datum.get("select", True):
            return
        target = datum["target"]
        user = datum.get("user")
        row = [0.0] * len(COLUMNS)
        row[COLUMN["tokens"]] = 1
        row[COLUMN["characters"]] = len(target)
        row[COLUMN["keystrokes"]] = len(target) + 1
        completions = datum.get("completions")
        if completions is not None:
            rank = rank_of(completions[0], target) if completions else None
            if rank is not None:
                row[COLUMN["predicted"]] = 1
                row[COLUMN["srr"]] = 1 / rank
                for n in NEXT_WORD_RANKS:
                    row[COLUMN[f"hit{n}"]] = rank <= n
            start = completion_start(completions, target)
            if start is not None:
                row[COLUMN["completion_characters"]] = len(target) - start
                row[COLUMN["completion_tokens"]] = 1
        logp = datum.get("logp")
        if logp is not None:
            row[COLUMN["entropy_sum"]] = -float(logp)
            row[COLUMN["entropy_tokens"]] = 1
        if self.by_message:
            key: GroupKey = (user, int(datum.get("message") or 0))
        else:
            key = user if user is not None else (None, int(datum.get("message") or 0))
        results = datum.get("results")
        if results is not None:
            self._wr_scores.add(*reranking.target_first(target, results))
            self._wr_pending.append(key)
        self._pending_keys.append(key)
        self._pending.append(row)
        if len(self._pending) >= _FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            keys: dict[GroupKey, int] = {}
            local = np.array([keys.setdefault(k, len(keys)) for k in self._pending_keys], dtype=np.int64)
            self._add(list(keys), local, np.array(self._pending, dtype=np.float64))
            self._pending_keys, self._pending = [], []
        if self._wr_pending:
            self._wr_groups.append(self._ids(self._wr_pending))
            self._wr_pending = []
            self._wr_scores.packed()    # rows stay in the order of _wr_groups

    def add_rows(self, users: list[str | int | None], user_codes: np.ndarray, messages: np.ndarray,
                 columns: dict[str, np.ndarray], wr: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """Add the selected rows of a record batch.

        Args:
            users: the distinct users (a dictionary).
            user_codes: per row, the index of its user in ``users`` (-1: null user), int64.
            messages: per row, the message number, int64.
            columns: per row values (``[N]`` arrays) of some of :data:`COLUMNS` (the
                others are 0; ``base_correct`` and ``correct`` come from ``wr``).
            wr: the ``wr`` score matrices of the rows (float32 ``[N, C]`` error and LM
                scores, target first), or None.
        """
        self._flush()
        n = len(user_codes)
        if n == 0:
            return
        null = user_codes < 0
        composite, low = user_codes, 0
        if null.any():
            low = int(messages[null].min())
            composite = np.where(null, len(users) + messages - low, user_codes)
        # runs of equal groups (a user's rows are contiguous in a log): summed by reduceat
        change = composite[1:] != composite[:-1]
        if self.by_message:
            change |= messages[1:] != messages[:-1]
        starts = np.concatenate(([0], np.flatnonzero(change) + 1))
        if self.by_message:
            keys = [(users[c] if c >= 0 else None, m)
                    for c, m in zip(user_codes[starts].tolist(), messages[starts].tolist())]
        else:
            keys = [users[c] if c < len(users) else (None, int(c - len(users) + low))
                    for c in composite[starts].tolist()]
        ids = self._ids(keys)
        sums = np.zeros((len(starts), len(COLUMNS)))
        for name, values in columns.items():
            sums[:, COLUMN[name]] = np.add.reduceat(np.asarray(values, dtype=np.float64), starts)
        np.add.at(self._sums, ids, sums)      # a group may come back in a later run
        if wr is not None and wr[0].shape[0]:
            self._wr_groups.append(np.repeat(ids, np.diff(np.append(starts, n))))
            self._wr_scores.add_matrices(*wr)

    def merge(self, other: "GroupSums") -> "GroupSums":
        """Add ``other``'s sums (in place); returns self."""
        other._flush()
        self._flush()
        keys = list(other.index)
        ids = self._ids(keys)
        self._sums[ids] += other._sums[:len(keys)]
        for groups in other._wr_groups:
            self._wr_groups.append(ids[groups])
        self._wr_scores.chunks.extend(other._wr_scores.packed())
        return self

    def finish(self, model: reranking.InterpolationModel | None) -> None:
        """Count, per group, the ``wr`` tokens correct by the error score alone and under
        ``model`` (the mixture fitted on the whole log; None: no ``wr`` data), then drop
        the score rows."""
        self._flush()
        groups = np.concatenate(self._wr_groups) if self._wr_groups else np.zeros(0, np.int64)
        chunks = self._wr_scores.packed()
        width = max((e.shape[1] for e, _ in chunks if e.shape[0]), default=0)
        start = 0
        for error, lm in chunks:
            ids = groups[start:start + error.shape[0]]
            start += error.shape[0]
            base = correct_rows(error, width, -math.inf)
            self._sums[:, COLUMN["base_correct"]] += np.bincount(ids, weights=base, minlength=len(self._sums))
            if model is not None:
                pad = model(np.float32(-np.inf), np.float32(-np.inf))
                right = correct_rows(model(error, lm), width, pad)
                self._sums[:, COLUMN["correct"]] += np.bincount(ids, weights=right, minlength=len(self._sums))
        self._wr_groups, self._wr_scores = [], reranking.ScoreMatrices()

    def table(self) -> GroupTable:
        """The sums, groups in canonical order (so the same data read in any pieces gives
        the same table, and the same resamples for a seed)."""
        self._flush()
        keys = sorted(self.index, key=_sort_key)
        return GroupTable(keys, self._sums[[self.index[k] for k in keys]])


def correct_rows(scores: np.ndarray, width: int, pad: float) -> np.ndarray:
    """Per row, 1.0 where column 0 beats every other column, as
    :func:`lmchallenge.stats.reranking.count_correct` counts them (float64 ``[N]``)."""
    if scores.shape[1] == 0:
        return np.zeros(scores.shape[0])
    others = scores[:, 1:].max(axis=1) if scores.shape[1] > 1 else np.full(scores.shape[0], -np.inf)
    if width > scores.shape[1]:
        others = np.maximum(others, pad)
    return (scores[:, 0] > others).astype(np.float64)


# --- resampling -------------------------------------------------------------------------------

BLOCK = 32
"""Resamples drawn from one random stream: resample block ``i`` draws from the ``i``-th child
(:meth:`numpy.random.Generator.spawn`) of the seed's generator, so the blocks are independent
and give the same totals whether they are drawn one after another or on several threads."""

DRAWN_CELLS = 1 << 20
"""Random draws held at once per thread (uint32, plus float64 counts: about 12 MiB)."""

PARALLEL_DRAWS = 1 << 22
"""Random draws (groups x resamples) from which the blocks are drawn on several threads: below
it a thread pool costs more than it saves.  NumPy releases the GIL while it draws and
multiplies, so two threads draw 1,000 resamples of 100k groups in 0.44 s instead of 0.62 s
(2-CPU machine; docs/uncertainty.md)."""


def resampled_totals(sums: np.ndarray, settings: Settings) -> np.ndarray:
    """Column totals of ``settings.resamples`` bootstrap resamples of the rows of ``sums``
    (float64 ``[G, K]``): float64 ``[resamples, K]``.

    Each resample draws ``G`` rows with replacement (uniform uint32 draws, counted with
    :func:`numpy.bincount`: a multinomial count vector ``w`` summing to ``G``) and its totals
    are ``w @ sums``.  Memory per thread is about :data:`DRAWN_CELLS` draws (or one
    resample's, for more groups) whatever the number of resamples.  The
    result depends only on ``sums`` and ``settings.seed`` (blocks of :data:`BLOCK` resamples
    from independent streams), not on the number of threads."""
    groups, resamples = sums.shape[0], settings.resamples
    out = np.zeros((resamples, sums.shape[1]))
    if groups == 0:
        return out
    odd = ~np.isfinite(sums)
    if odd.any():       # 0 x inf is NaN: a group not drawn must add nothing, not NaN
        return _with_odd_sums(sums, odd, settings)
    starts = range(0, resamples, BLOCK)
    streams = np.random.default_rng(settings.seed).spawn(len(starts))
    rows = max(1, min(BLOCK, DRAWN_CELLS // groups))   # resamples drawn at once: a function of G only

    def draw_block(block: int) -> None:
        rng = streams[block]
        counts = np.empty((rows, groups))
        for begin in range(starts[block], min(starts[block] + BLOCK, resamples), rows):
            b = min(rows, starts[block] + BLOCK - begin, resamples - begin)
            drawn = rng.integers(0, groups, size=(b, groups), dtype=np.uint32)
            for row in range(b):        # one resample's count vector at a time stays in the cache
                counts[row] = np.bincount(drawn[row], minlength=groups)
            out[begin:begin + b] = counts[:b] @ sums

    threads = min(os.cpu_count() or 1, len(starts), 8) if groups * resamples >= PARALLEL_DRAWS else 1
    if threads > 1:
        with ThreadPoolExecutor(threads, thread_name_prefix="lmc-bootstrap") as pool:
            list(pool.map(draw_block, range(len(starts))))
    else:
        for block in range(len(starts)):
            draw_block(block)
    return out


def _with_odd_sums(sums: np.ndarray, odd: np.ndarray, settings: Settings) -> np.ndarray:
    """:func:`resampled_totals` of ``sums`` some of whose values (``odd``, the same shape)
    are infinite or NaN (a log holding such a score): the finite part is resampled as usual,
    and each odd value is added to the totals of the resamples that drew its group (the
    same draws: one resampling with a column of 0/1 markers per odd group)."""
    rows = np.flatnonzero(odd.any(axis=1))
    finite = np.where(odd, 0.0, sums)
    markers = np.zeros((sums.shape[0], len(rows)))
    markers[rows, np.arange(len(rows))] = 1.0
    both = resampled_totals(np.concatenate([finite, markers], axis=1), settings)
    out, drawn = both[:, :sums.shape[1]], both[:, sums.shape[1]:] > 0
    for j, row in enumerate(rows):
        for column in np.flatnonzero(odd[row]):
            out[drawn[:, j], column] += sums[row, column]
    return out


def ratio(numerator: Any, denominator: Any) -> Any:
    """``numerator / denominator`` (floats or arrays), NaN (or inf) without a warning where
    the denominator is 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.true_divide(numerator, denominator)


def carrying(denominators: np.ndarray) -> int:
    """The number of groups with data for a figure: those whose sum in its denominator
    column (``denominators``, one per group) is not 0.  A resample's figure depends only on
    how often it drew those; with fewer than two, on nothing."""
    return int(np.count_nonzero(denominators))


def _percentile(values: np.ndarray, levels: Sequence[float]) -> list[float]:
    """The ``levels`` quantiles of ``values`` (linear interpolation, as
    :func:`numpy.quantile`'s default), NaNs left out; infinite values count, an endpoint
    between a finite and an infinite value being infinite (QA: one infinite score gave the
    interval ``[NaN, NaN]`` beside an estimate of ``inf``)."""
    values = values[~np.isnan(values)]
    if not len(values):
        return [math.nan] * len(levels)
    if np.isfinite(values).all():
        return [float(x) for x in np.quantile(values, levels)]
    ordered = np.sort(values)
    out = []
    for level in levels:
        h = (len(ordered) - 1) * level
        low = math.floor(h)
        a, b = float(ordered[low]), float(ordered[min(low + 1, len(ordered) - 1)])
        out.append(a if h == low or a == b or math.isinf(a) else b if math.isinf(b)
                   else float(np.quantile(ordered, level)))
    return out


def _bca_levels(theta: float, resampled: np.ndarray, jackknife: np.ndarray,
                alpha: float) -> list[float]:
    """The BCa quantile levels (Efron & Tibshirani 1993, eq. 14.9-14.15)."""
    normal = NormalDist()
    below = (np.count_nonzero(resampled < theta) + np.count_nonzero(resampled <= theta)) / (2 * len(resampled))
    if not 0 < below < 1:
        return [alpha / 2, 1 - alpha / 2]
    z0 = normal.inv_cdf(below)
    jackknife = jackknife[np.isfinite(jackknife)]
    a = 0.0   # no acceleration where no group can be left out (one group)
    if len(jackknife):
        d = jackknife.mean() - jackknife
        denominator = 6 * float((d ** 2).sum()) ** 1.5
        a = float((d ** 3).sum()) / denominator if denominator else 0.0
    levels = []
    for z in (normal.inv_cdf(alpha / 2), normal.inv_cdf(1 - alpha / 2)):
        levels.append(normal.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))))
    return levels


def interval(table: GroupTable, totals: np.ndarray, numerator: str, denominator: str,
             settings: Settings) -> list[float]:
    """``[low, high]`` of ``sum(numerator) / sum(denominator)`` from resampled totals
    (:func:`resampled_totals` of ``table``); NaN where no resample has a denominator, where
    a group's numerator is NaN (a NaN score: the figure is NaN, and an interval of the
    resamples that missed its group would look valid: QA), and where fewer than two groups
    have a denominator (every resample's figure is then that group's: an interval of width
    0, which read as certain: QA)."""
    num, den = COLUMN[numerator], COLUMN[denominator]
    if np.isnan(table.sums[:, num]).any() or carrying(table.sums[:, den]) < 2:
        return [math.nan, math.nan]
    resampled = ratio(totals[:, num], totals[:, den])
    alpha = 1 - settings.confidence
    levels = [alpha / 2, 1 - alpha / 2]
    if settings.method == "bca":
        whole = table.totals()
        theta = float(ratio(whole[num], whole[den]))
        jackknife = ratio(whole[num] - table.sums[:, num], whole[den] - table.sums[:, den])
        levels = _bca_levels(theta, resampled[np.isfinite(resampled)], jackknife, alpha)
    return _percentile(resampled, levels)


ROUNDING = 1e-12
"""The relative distance of an interval's endpoint from its estimate that is rounding alone."""


def held(bounds: Sequence[float], value: Any) -> list[float]:
    """``bounds`` (``[low, high]``) with an endpoint that misses ``value``, the estimate, by
    rounding alone (:data:`ROUNDING`) set to it: resamples add their sums in another order
    than the estimate, so the interval of resamples that are all alike (one user) left its
    own estimate out by the last digit."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return list(bounds)
    low, high = bounds
    near = ROUNDING * max(abs(value), 1e-300)
    if value < low <= value + near:
        low = float(value)
    if value - near <= high < value:
        high = float(value)
    return [low, high]


def holding(ci: dict[str, list[float]], reported: dict[str, Any]) -> dict[str, list[float]]:
    """``ci`` (``{key path: [low, high]}``) with each interval :func:`held` to its figure in
    the statistics ``reported`` (nested, as printed)."""
    return {key: held(bounds, lookup(reported, key)) for key, bounds in ci.items()}


def present_metrics(human: dict[str, Any], derived: bool = False) -> list[tuple[str, str, str]]:
    """The :data:`METRICS` that a human ``lmc stats`` result reports (with ``derived``,
    also the :data:`DERIVED` ones of the groups it reports)."""
    return [m for m in METRICS if lookup(human, m[0]) is not None
            or (derived and m[0] in DERIVED and lookup(human, m[0].split(".")[0]) is not None)]


def lookup(nested: dict[str, Any], path: str) -> Any:
    """The value at a key path (``"prediction.hit1"``) of nested dicts, or None."""
    for part in path.split("."):
        if not isinstance(nested, dict) or part not in nested:
            return None
        nested = nested[part]
    return nested


def intervals(table: GroupTable, metrics: Sequence[tuple[str, str, str]],
              settings: Settings, warn: bool = True, source: str | None = None) -> dict[str, list[float]]:
    """``{key path: [low, high]}`` for each of ``metrics`` (see :data:`METRICS`).

    Args:
        table: the log's per-group sums.
        metrics: ``(key, numerator column, denominator column)`` triples.
        settings: confidence, resamples, seed, method.
        warn: warn (logging) when there are fewer than :data:`FEW_GROUPS` groups; a caller
            that resamples several logs of the same data warns once.
        source: the log's name, that begins each warning (``lmc stats`` of several logs:
            QA), or None.
    Raises:
        ValueError: an unknown method, or a confidence outside (0, 1).
    """
    _check(settings)
    if not metrics or not table.keys:
        return {}
    if warn:
        for line in few_groups(table, metrics):
            LOG.warning("%s%s", f"{source}: " if source else "", line)
    used = sorted({COLUMN[name] for _, num, den in metrics for name in (num, den)})
    totals = np.zeros((settings.resamples, len(COLUMNS)))
    totals[:, used] = resampled_totals(table.sums[:, used], settings)     # only the columns used
    return {key: interval(table, totals, num, den, settings) for key, num, den in metrics}


def effective_groups(denominators: np.ndarray) -> float:
    """Kish's effective sample size of a ratio's groups, ``(sum d)^2 / sum d^2`` over the
    groups' sums ``d`` in its denominator column (Kish 1965, "Survey Sampling", 11.7): the
    number of groups of equal size that would spread the figure's data as evenly; the count of
    groups when they are of one size, about 1 when one of them holds nearly all the data."""
    d = np.asarray(denominators, dtype=np.float64)
    squares = float((d * d).sum())
    return float(d.sum()) ** 2 / squares if squares else 0.0


def few_groups(table: GroupTable, metrics: Sequence[tuple[str, str, str]]) -> list[str]:
    """Warnings (one line each) for the ``metrics`` whose intervals rest on fewer than
    :data:`FEW_GROUPS` groups: the groups with a non-zero denominator (:func:`carrying`),
    since a resample's figure depends only on how often it drew those (QA: the
    ``entropy.mean`` of a log in which one user of 30 had scored tokens got an interval of
    width 0 and no warning; now NaN, see :func:`interval`).  With fewer than that many groups
    in all, one line says so, and a line more for each count of groups fewer than all.
    Metrics with enough groups whose data is held by a few large ones (an
    :func:`effective_groups` below :data:`FEW_GROUPS`) get a line too (QA: 50 users of sizes
    lognormal with sigma 2: a 95% interval covered 64%; one user of 30 holding 90% of the
    tokens: no warning)."""
    groups = len(table.keys)
    counts: dict[int, list[str]] = {}
    uneven: dict[str, list[str]] = {}
    for key, _, denominator in metrics:
        sums = table.sums[:, COLUMN[denominator]]
        n = carrying(sums)
        if 0 < n < FEW_GROUPS:
            counts.setdefault(n, []).append(key)
        elif n >= FEW_GROUPS and (effective := effective_groups(sums)) < FEW_GROUPS:
            uneven.setdefault(f"{effective:.1f}", []).append(key)
    lines = []
    if 0 < groups < FEW_GROUPS:
        lines.append("only 1 user (or message) to resample: the bootstrap intervals are NaN "
                     "(every resample's figure would be its own)" if groups == 1 else
                     f"only {groups} users (or messages) to resample: the bootstrap intervals are rough")
        counts.pop(groups, None)            # said by that line ("only 5 of 5 users": QA)
    for n, keys in sorted(counts.items()):
        lines.append(f"only {n} of {groups} users (or messages) have data for {', '.join(keys)}: "
                     + _intervals_of(keys) + (" NaN (every resample's figure would be that "
                                              "one's)" if n == 1 else " rough"))
    for effective, keys in sorted(uneven.items(), key=lambda item: float(item[0])):
        lines.append(f"a few of the {groups} users (or messages) hold most of the data for "
                     f"{', '.join(keys)}, as much as {effective} of equal size would (Kish's "
                     f"effective sample size): {_intervals_of(keys)} rough")
    return lines


def _intervals_of(keys: Sequence[str]) -> str:
    return "its bootstrap interval is" if len(keys) == 1 else "their bootstrap intervals are"


def few_resamples(settings: Settings) -> str | None:
    """Why intervals with ``settings`` are rough whatever the data, if they are: fewer than
    :data:`TAIL_RESAMPLES` resamples beyond each endpoint of a percentile interval (its
    endpoints are then a few extreme resamples; Efron & Tibshirani 1993, "An Introduction to
    the Bootstrap", ask for about 1,000 resamples for percentile intervals).  One line, for
    the command to warn once (not per log)."""
    tail = settings.resamples * (1 - settings.confidence) / 2
    if tail >= TAIL_RESAMPLES * (1 - 1e-9):     # 200 x 0.1 / 2 is 9.999999999999998
        return None
    wanted = math.ceil(2 * TAIL_RESAMPLES / (1 - settings.confidence) * (1 - 1e-9))
    shown = f"{tail:.3g}"
    if float(shown) >= TAIL_RESAMPLES:      # 9.995 is not "10"
        shown = f"{math.floor(tail * 100) / 100:g}"
    level = f"{settings.confidence:g}"
    if float(level) >= 1:       # 0.999999999 is not "a 1 interval"
        level = repr(settings.confidence)
    advice = (f"--resamples {wanted} or more" if wanted <= MAX_RESAMPLES else
              f"that takes about {float(f'{wanted:.3g}'):,.0f} resamples, more than the most, "
              f"{MAX_RESAMPLES:,}: use a lower --confidence")
    return (f"{settings.resamples} resamples leave {shown} beyond each endpoint of a "
            f"{level} interval: its endpoints are rough ({advice})")


def _check(settings: Settings) -> None:
    if settings.method not in METHODS:
        raise ValueError(f"unknown interval method {settings.method!r} (one of {', '.join(METHODS)})")
    if not 0 < settings.confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), not {settings.confidence}")
    if not MIN_RESAMPLES <= settings.resamples <= MAX_RESAMPLES:
        raise ValueError(f"resamples must be from {MIN_RESAMPLES} to {MAX_RESAMPLES:,}, "
                         f"not {settings.resamples}")


# --- paired comparison ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Comparison:
    """One metric of a log against a baseline on the same groups.

    Attributes:
        value, baseline: the log's and the baseline's figure.
        delta: ``value - baseline``.
        ci: ``[low, high]`` interval of the delta (NaN: see :func:`paired`).
        p: two-sided p-value of "no difference" (NaN: see :func:`paired`).
    """

    value: float
    baseline: float
    delta: float
    ci: list[float]
    p: float

    def as_dict(self) -> dict[str, Any]:
        return dict(value=self.value, baseline=self.baseline, delta=self.delta, ci=self.ci, p=self.p)


def paired(log: GroupTable, baseline: GroupTable, metrics: Sequence[tuple[str, str, str]],
           settings: Settings, test: str = "bootstrap") -> dict[str, Comparison]:
    """Paired comparison of ``log`` against ``baseline`` (the same groups) per metric.

    Both tables are resampled with the same group counts (paired bootstrap); the delta's
    interval is the percentile (or BCa) interval of the resampled deltas; ``p`` is from
    the shifted bootstrap distribution (``test="bootstrap"``) or the approximate
    randomisation test (``test="randomisation"``, :func:`randomised`), see the module
    docstring.

    Args:
        log, baseline: per-group sums; ``log`` is aligned to ``baseline``'s groups.
        metrics: ``(key, numerator column, denominator column)`` triples.
        settings: confidence, resamples (also the randomisation trials), seed, method.
        test: ``"bootstrap"`` or ``"randomisation"``.
    Returns:
        ``{key: Comparison}``; a metric that fewer than two groups have data for (in either
        log) has a NaN interval and p-value: every resample would be that one group.
    """
    _check(settings)
    if test not in ("bootstrap", "randomisation"):
        raise ValueError(f"unknown test {test!r}")
    log = log.aligned(baseline.keys)
    log = GroupTable(log.keys, same_sums_as(log.sums, baseline.sums))
    k = len(COLUMNS)
    both = np.concatenate([log.sums, baseline.sums], axis=1)
    totals = resampled_totals(both, settings) if baseline.keys else np.zeros((0, 2 * k))
    shuffled = randomised(log, baseline, settings) if test == "randomisation" else None
    whole_log, whole_base = log.totals(), baseline.totals()
    out = {}
    for key, numerator, denominator in metrics:
        num, den = COLUMN[numerator], COLUMN[denominator]
        value = float(ratio(whole_log[num], whole_log[den]))
        base = float(ratio(whole_base[num], whole_base[den]))
        delta = value - base
        deltas = ratio(totals[:, num], totals[:, den]) - ratio(totals[:, k + num], totals[:, k + den])
        deltas = deltas[np.isfinite(deltas)]
        alpha = 1 - settings.confidence
        levels = [alpha / 2, 1 - alpha / 2]
        if settings.method == "bca" and len(deltas):
            jack = (ratio(whole_log[num] - log.sums[:, num], whole_log[den] - log.sums[:, den])
                    - ratio(whole_base[num] - baseline.sums[:, num], whole_base[den] - baseline.sums[:, den]))
            levels = _bca_levels(delta, deltas, jack, alpha)
        ci = _percentile(deltas, levels)
        if np.isnan(log.sums[:, num]).any() or np.isnan(baseline.sums[:, num]).any():
            ci = [math.nan, math.nan]      # a NaN score: the delta is NaN (see interval)
        if shuffled is None:
            null = np.abs(deltas - delta)
        else:
            a, b = shuffled
            null = np.abs(ratio(a[:, num], a[:, den]) - ratio(b[:, num], b[:, den]))
            null = null[np.isfinite(null)]
        p = _p_value(null, abs(delta)) if math.isfinite(delta) else math.nan
        if carrying(log.sums[:, den] + baseline.sums[:, den]) < 2:
            # one group: every resample's delta is the delta, so any difference had p =
            # 1 / (B + 1) and an interval of width 0 (QA: "significant" on one user)
            ci, p = [math.nan, math.nan], math.nan
        out[key] = Comparison(value, base, delta, ci, p)
    return out


def _p_value(null: np.ndarray, observed: float) -> float:
    """``(1 + #{null >= observed}) / (1 + len(null))`` (a difference of 0 is never
    counted as evidence; so a log against itself has ``p = 1``).  A null value that misses
    ``observed`` by rounding alone (:data:`ROUNDING`, relative) counts as reaching it, as
    ``scipy.stats.permutation_test`` does: a randomisation trial that swaps every group (or
    none) gives the observed difference summed in another order, and half of those fell
    short by the last bit (QA: 2 users, ``--paired-ar`` p = 0.211 where it is about 0.5)."""
    reach = observed - abs(observed) * ROUNDING
    return (1 + int(np.count_nonzero(null >= reach))) / (1 + len(null))


SAME_SUMS_RTOL = 1e-9
"""Group sums of two logs this close (relatively) are the same sums: see :func:`same_sums_as`."""


def same_sums_as(sums: np.ndarray, baseline: np.ndarray) -> np.ndarray:
    """``sums`` (float64 ``[G, len(COLUMNS)]``) with each value within a relative
    :data:`SAME_SUMS_RTOL` of ``baseline``'s (same shape) replaced by it.

    The same tokens summed in another order (an ``lmc-dist`` run's partitions, a log in
    another form) give sums that differ in their last bits; without this, a log compared
    with the same log in another form showed a difference of -0.0000 with p < 1 instead
    of 0 with p = 1.  Two models' sums over a group are never this close unless they
    scored its tokens alike.
    """
    return np.where(np.isclose(sums, baseline, rtol=SAME_SUMS_RTOL, atol=0), baseline, sums)


def randomised(log: GroupTable, baseline: GroupTable, settings: Settings) -> tuple[np.ndarray, np.ndarray]:
    """Approximate randomisation: ``settings.resamples`` trials, in each of which every
    group's sums are swapped between the two logs with probability 1/2.

    Returns:
        ``(a, b)``: the two pseudo-logs' column totals, float64 ``[trials, len(COLUMNS)]``.
    """
    rng = np.random.default_rng(settings.seed + 1)
    groups = len(baseline.keys)
    difference = log.sums - baseline.sums
    a = np.empty((settings.resamples, len(COLUMNS)))
    whole_base, whole_log = baseline.totals(), log.totals()
    step = max(1, min(settings.resamples, CHUNK_CELLS // max(groups, 1)))
    for begin in range(0, settings.resamples, step):
        b = min(step, settings.resamples - begin)
        swap = rng.integers(0, 2, size=(b, groups)).astype(np.float64)
        a[begin:begin + b] = whole_base + swap @ difference     # swapped groups take the log's sums
    return a, whole_base + whole_log - a


# --- logs ------------------------------------------------------------------------------------------

@dataclass
class LogSummary:
    """A log's statistics state, its ``wr`` fit and its per-group sums (one pass).

    Attributes:
        state: the :class:`lmchallenge.stats.StatsState` (its ``wr`` scores included).
        fit: the mixture fit (zero counts and no model without ``wr`` data).
        table: per-group sums, ``correct`` counted under ``fit``.
    """

    state: Any
    fit: reranking.RerankingFit
    table: GroupTable

    def result(self, human: bool = True, extensions: bool = False) -> dict[str, Any]:
        """The ``lmc stats`` result (as :meth:`lmchallenge.stats.StatsState.result`)."""
        return self.state.result(human=human, fit=self.fit, extensions=extensions)

    def metrics(self, derived: bool = False) -> list[tuple[str, str, str]]:
        """The :data:`METRICS` this log's human statistics report (see
        :func:`present_metrics`)."""
        return present_metrics(self.state.result(human=True, fit=self.fit), derived)


def summarise(path: str, lines: int | None = None, by_message: bool = False) -> LogSummary:
    """Read a log once (as ``lmc stats`` does: column-wise where it can) for its statistics
    and per-group sums.

    Args:
        path: the log (any form :func:`lmchallenge.stats.state_of_log` reads).
        lines: only the first ``lines`` datums.
        by_message: per-message sums instead of per-user (see :class:`GroupSums`).
    Raises:
        InputError: as :func:`lmchallenge.stats.state_of_log`.
    """
    from lmchallenge.stats.compute import state_of_log

    groups = GroupSums(by_message=by_message)
    state = state_of_log(path, lines, groups=groups)
    fit = reranking.fit(state.scores)
    groups.finish(fit.model)
    return LogSummary(state, fit, groups.table())
