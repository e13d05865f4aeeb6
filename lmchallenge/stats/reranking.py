"""The word reranking (``wr``) mixture model and its fit for Hit@1.

A ``wr`` datum carries, for every candidate of a corrupted word, an error-model score
``e`` (log-probability of the corruption, <= 0) and a language-model score ``l`` (or null).
LM Challenge 5.x combines them with an interpolation that has a floor on the LM part::

    score = (1 - alpha) * e + max(alpha * l, beta)        (l = null counts as -inf)

and fits ``(alpha, beta)`` to maximise the number of tokens whose target scores strictly
higher than every other candidate (Hit@1, "accuracy"), with the Nelder-Mead simplex
(:func:`scipy.optimize.fmin`) started at ``alpha = 0.5``, ``beta = median(finite l) / 2``
(docs/statistics.md, "wr").

Scores are kept as float32 matrices, one row per token with the target's scores in
column 0 and the other candidates after it, padded with ``-inf`` (:class:`ScoreMatrices`).
The fit only needs three things from the scores (:class:`ScoreSource`): their widest row,
the k-th smallest finite LM score, and the number of correct rows under given parameters.
Those add up over pieces, so :mod:`lmc_dist.reduce` evaluates them where the matrices
were produced and the client never holds all candidates.
"""

from __future__ import annotations

import logging
import numbers
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

LOG = logging.getLogger(__name__)

CHUNK_ROWS = 4096
"""Rows buffered as Python lists before they are packed into a float32 matrix."""


@dataclass(frozen=True)
class InterpolationModel:
    """``score = (1 - alpha) * error + max(alpha * lm, beta)``; a null LM score is ``-inf``.

    Attributes:
        alpha: weight of the language model (float64).
        beta: floor of the language model's contribution (float64, log-probability units).
    """

    alpha: float
    beta: float

    def __call__(self, error: Any, lm: Any) -> Any:
        """Combined score(s).

        Args:
            error: error score(s): a float or a float32 array of any shape.
            lm: LM score(s) of the same shape; None (scalar) means not scored.
        Returns:
            The combined score(s), same shape (float64 arrays for array input); NaN where
            the terms are infinities of opposite signs (e.g. ``alpha = 1`` and an error
            score of ``-inf``, as the fit's simplex may try), which ranks above nothing.
        """
        if lm is None:
            lm = -math.inf
        alpha, beta = np.float64(self.alpha), np.float64(self.beta)
        with np.errstate(invalid="ignore"):     # the NaN above is a result, not a fault
            return (1 - alpha) * error + np.maximum(alpha * lm, beta)

    @property
    def args(self) -> dict[str, float]:
        """The parameters as ``{"alpha": ..., "beta": ...}`` (``lmc stats --no-human``)."""
        return {"alpha": float(self.alpha), "beta": float(self.beta)}

    def __str__(self) -> str:
        return (f"score = {1 - self.alpha:.3g} * error + "
                f"max({self.alpha:.3g} * lm, {self.beta:.3g})")


def checked_score(value: Any, name: str) -> float:
    """``value`` as a float (an integer beyond the float range as an infinity, as the
    columnar readers read it).

    Raises:
        TypeError: ``value`` is not a JSON number (a string or a boolean is not one).
    """
    kind = type(value)
    if kind is not float and (kind is bool or not isinstance(value, numbers.Real)):
        raise TypeError(f"{name} is {value!r}, not a number")
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


_ROWS = (list, tuple, np.ndarray)


def target_first(target: str, results: Sequence[Sequence[Any]]) -> tuple[list[Any], list[Any]]:
    """The error and LM scores of one ``wr`` datum, the target's candidate(s) first.

    Args:
        target: the intended word.
        results: ``[candidate, error_score, lm_score_or_None, ...]`` rows (lists; tuples or
            arrays from Python too).
    Returns:
        ``(errors, lms)``: lists of numbers (LM entries may be None), same order.
    Raises:
        TypeError: ``results`` is not rows of a candidate (a string), an error score (a
            number) and an LM score (a number or None).
    """
    if not isinstance(results, _ROWS):
        raise TypeError(f"results is {results!r}, not a list")
    errors, lms, other_errors, other_lms = [], [], [], []
    for row in results:
        if not (isinstance(row, _ROWS) and len(row) >= 3 and type(row[0]) is str):
            raise TypeError(f"a row of results is {row!r}, not [candidate, error score, "
                            f"LM score]")
        error, lm = row[1], row[2]
        if type(error) is not float and type(error) is not int:     # (the quick test first)
            checked_score(error, "an error score")
        if lm is not None and type(lm) is not float and type(lm) is not int:
            checked_score(lm, "an LM score")
        if row[0] == target:
            errors.append(error)
            lms.append(lm)
        else:
            other_errors.append(error)
            other_lms.append(lm)
    return errors + other_errors, lms + other_lms


def jagged_to_matrix(rows: Sequence[Sequence[float | None]], width: int) -> np.ndarray:
    """Rows of unequal length as a float32 ``[len(rows), width]`` matrix, None and padding
    as ``-inf``."""
    matrix = np.full((len(rows), width), -np.inf, dtype=np.float32)
    for i, row in enumerate(rows):
        matrix[i, :len(row)] = [-np.inf if v is None else v for v in row]
    return matrix


def count_correct(scores: np.ndarray, width: int | None = None, pad: float = -math.inf) -> int:
    """Rows whose column 0 is strictly greater than every other column (Hit@1).

    Args:
        scores: ``[N, C]`` combined scores, target in column 0.
        width: the width the rows are compared at; columns beyond ``C`` up to ``width`` hold
            ``pad`` (the score of a padding cell), as if the matrix had been padded.
        pad: the combined score of a padding cell.
    Returns:
        The count, in ``[0, N]``.
    """
    if scores.shape[0] == 0 or scores.shape[1] == 0:
        return 0   # no candidates at all (every results list empty): never correct
    if scores.shape[1] > 1:
        others = scores[:, 1:].max(axis=1)
    else:
        others = np.full(scores.shape[0], -np.inf)
    if width is not None and width > scores.shape[1]:
        others = np.maximum(others, pad)
    return int((scores[:, 0] > others).sum())


class ScoreSource(Protocol):
    """What :func:`fit` needs from the score matrices, wherever they are."""

    def max_candidates(self) -> int:
        """The widest row (0 when there are no rows)."""

    def finite_lm_count(self) -> int:
        """How many LM scores are finite."""

    def kth_finite_lm(self, k: int) -> np.float32:
        """The k-th smallest finite LM score (0-based)."""

    def correct(self, model: InterpolationModel | None, width: int) -> int:
        """Rows correct under ``model`` (None: the error score alone) at ``width`` columns."""


@dataclass
class ScoreMatrices:
    """The target-first error and LM scores of many ``wr`` tokens, as float32 chunks.

    Mergeable: :meth:`merge` appends another's chunks; every query below is a sum or an
    order statistic over rows, so the order of merging does not matter.
    """

    chunks: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    _errors: list[list[Any]] = field(default_factory=list)
    _lms: list[list[Any]] = field(default_factory=list)

    def add(self, errors: Sequence[Any], lms: Sequence[Any]) -> None:
        """One token's scores (target first); None LM scores are ``-inf``."""
        self._errors.append(list(errors))
        self._lms.append(list(lms))
        if len(self._errors) >= CHUNK_ROWS:
            self._pack()

    def add_matrices(self, error: np.ndarray, lm: np.ndarray) -> None:
        """Many tokens' scores at once: float32 ``[N, C]`` matrices, target in column 0."""
        if error.shape[0]:
            self.chunks.append((error.astype(np.float32, copy=False), lm.astype(np.float32, copy=False)))

    def _pack(self) -> None:
        if self._errors:
            width = max(len(r) for r in self._errors)
            self.chunks.append((jagged_to_matrix(self._errors, width),
                                jagged_to_matrix(self._lms, width)))
            self._errors, self._lms = [], []

    def packed(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """All chunks as ``(error, lm)`` float32 matrices."""
        self._pack()
        return self.chunks

    def merge(self, other: "ScoreMatrices") -> "ScoreMatrices":
        """Append ``other``'s rows (in place); returns self."""
        self.chunks.extend(other.packed())
        self._pack()
        return self

    def rows(self) -> int:
        return sum(e.shape[0] for e, _ in self.packed())

    def max_candidates(self) -> int:
        return max((e.shape[1] for e, _ in self.packed() if e.shape[0]), default=0)

    def finite_lm_count(self) -> int:
        return int(sum(int((lm != -np.inf).sum()) for _, lm in self.packed()))

    def count_lm_at_most(self, value: np.float32) -> int:
        """How many LM scores other than ``-inf`` are <= ``value``."""
        return int(sum(int(((lm != -np.inf) & (lm <= value)).sum()) for _, lm in self.packed()))

    def kth_finite_lm(self, k: int) -> np.float32:
        values = np.concatenate([lm[lm != -np.inf] for _, lm in self.packed()] or
                                [np.zeros(0, dtype=np.float32)])
        return np.partition(values, k)[k]

    def correct(self, model: InterpolationModel | None, width: int) -> int:
        total = 0
        pad = -math.inf if model is None else model(np.float32(-np.inf), np.float32(-np.inf))
        for error, lm in self.packed():
            scores = error if model is None else model(error, lm)
            total += count_correct(scores, width, pad)
        return total


def median_of_finite_lm(source: ScoreSource) -> float:
    """The median of the LM scores other than ``-inf``, as :func:`numpy.median` computes it
    on the float32 values (the mean of the two middle values, in float32, for an even
    count); NaN when there are none."""
    n = source.finite_lm_count()
    if n == 0:
        return math.nan
    if n % 2:
        return float(source.kth_finite_lm(n // 2))
    middle = np.array([source.kth_finite_lm(n // 2 - 1), source.kth_finite_lm(n // 2)],
                      dtype=np.float32)
    return float(np.mean(middle))


@dataclass(frozen=True)
class RerankingFit:
    """The outcome of fitting the mixture on some tokens.

    Attributes:
        max_candidates: the widest candidate list.
        base_correct: tokens correct by the error score alone.
        correct: tokens correct under the fitted model (LM Challenge 5.x's fit, which may end
            below ``base_correct``).
        model: the fitted model (None when there were no tokens).
        correct_at_least_base: the best of ``correct``, of a second fit started from the
            error-model-only mixture, and of ``base_correct``: never below ``base_correct``.
    """

    max_candidates: int
    base_correct: int
    correct: int
    model: InterpolationModel | None
    correct_at_least_base: int = 0


BELOW_BASE_WARNING = ("wr: the reranking fit ends below the error model alone: %d tokens correct "
                      "vs %d (reranking.accuracy < reranking.base_accuracy, as LM Challenge 5.x's "
                      "fit can); a fit never below it counts %d (lmc stats --derived: "
                      "reranking.accuracy_at_least_base)")
"""Logged (stderr) when LM Challenge 5.x's fit is worse than no language model at all."""


def fit(source: ScoreSource) -> RerankingFit:
    """Fit :class:`InterpolationModel` for Hit@1 on ``source`` (Nelder-Mead from
    ``alpha=0.5, beta=median(finite lm)/2``, as LM Challenge 5.x does), and again from the
    error-model-only mixture (``alpha=0.5`` and ``beta`` at least every ``alpha * lm``: the
    LM part is the constant ``beta``) for :attr:`RerankingFit.correct_at_least_base`.
    Warns (:data:`BELOW_BASE_WARNING`) when the first fit ends below the base accuracy.

    Args:
        source: the scores (local matrices, or a distributed view of them).
    Returns:
        The fit; with no tokens, zero counts and no model.
    """
    width = source.max_candidates()
    if width == 0:
        return RerankingFit(0, 0, 0, None)
    import scipy.optimize  # only when there is something to fit: it takes long to import

    def objective(x: np.ndarray) -> float:
        return -source.correct(InterpolationModel(x[0], x[1]), width)

    best = scipy.optimize.fmin(objective, x0=[0.5, 0.5 * median_of_finite_lm(source)], disp=False)
    model = InterpolationModel(best[0], best[1])
    base, correct = source.correct(None, width), source.correct(model, width)
    from_error = scipy.optimize.fmin(objective, x0=[0.5, _error_only_beta(source)], disp=False)
    at_least_base = max(correct, base, source.correct(InterpolationModel(*from_error), width))
    if correct < base:
        LOG.warning(BELOW_BASE_WARNING, correct, base, at_least_base)
    return RerankingFit(max_candidates=width, base_correct=base, correct=correct, model=model,
                        correct_at_least_base=at_least_base)


def _error_only_beta(source: ScoreSource) -> float:
    """A ``beta`` with ``0.5 * lm <= beta`` for every finite LM score (so the mixture at
    ``alpha = 0.5`` ranks by the error score alone): half the largest, or 0."""
    n = source.finite_lm_count()
    return max(0.0, 0.5 * float(source.kth_finite_lm(n - 1))) if n else 0.0


def scores_of(data: Iterable[dict[str, Any]]) -> ScoreMatrices:
    """The score matrices of the ``wr`` datums among ``data`` (all of them: select first)."""
    scores = ScoreMatrices()
    for datum in data:
        results = datum.get("results")
        if results is not None:
            scores.add(*target_first(datum["target"], results))
    return scores


def fit_model(data: Iterable[dict[str, Any]]) -> InterpolationModel:
    """The mixture fitted on the ``wr`` datums of ``data`` (the caller selects them).

    Raises:
        ValueError: ``data`` has no ``wr`` datum.
    """
    result = fit(scores_of(data))
    if result.model is None:
        raise ValueError("no word reranking (wr) data to fit a reranking model on")
    return result.model
