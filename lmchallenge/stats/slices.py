"""Statistics per slice of a log (``lmc stats --by user|message-length``) and the per-token
outcome columns behind them (:func:`token_table`, for pandas).

Both come from the one column-wise pass of ``lmc stats`` (Parquet and jsonl logs; datum by
datum otherwise): the per-group sums of :mod:`lmchallenge.stats.bootstrap` are already the
statistics per user (or per message), so a slice is a sum of groups.

* ``--by user``: one row per user (``"user"``); a log without users (plain text) is one
  row with ``"user": null``.
* ``--by message-length``: messages binned by their number of selected tokens in powers of
  two (``"1"``, ``"2-3"``, ``"4-7"``, ``"8-15"``, ...), one row per bin
  (``"message_length"``, ``"messages"``).

Each row has ``tokens`` and the figures of :data:`lmchallenge.stats.bootstrap.METRICS` that the
log's ``lmc stats`` reports, nested by key path as there (``{"prediction": {"hit1": ..}}``).

Pandas recipe (the per-token columns of :func:`token_table`)::

    from lmchallenge.stats.slices import token_table
    tokens = token_table("run_dir")             # or a .parquet / .jsonl log
    by_user = tokens.groupby("user", dropna=False)[["hit1", "tokens"]].sum()
    hit1_per_user = by_user.hit1 / by_user.tokens
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lmchallenge.stats import bootstrap
from lmchallenge.stats import reranking
from lmchallenge.stats.derived import derived_figures

BY = ("user", "message-length")


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = out
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return out


def _figures(sums: np.ndarray, metrics: Sequence[tuple[str, str, str]], derived: bool) -> dict[str, Any]:
    """A slice's figures from its sums; with ``derived``, the entropy also in bits and as
    perplexity (``completion.ksr`` is among ``metrics`` then)."""
    flat: dict[str, Any] = {"tokens": int(sums[bootstrap.COLUMN["tokens"]])}
    for key, num, den in metrics:
        d = sums[bootstrap.COLUMN[den]]
        flat[key] = float(sums[bootstrap.COLUMN[num]] / d) if d else None
    if derived:
        flat.update(derived_figures(flat, None))
    return _nested(flat)


def length_bin(tokens: int) -> str:
    """The power-of-two bin of a message length: 1 -> ``"1"``, 5 -> ``"4-7"``."""
    low = 1 << (max(tokens, 1).bit_length() - 1)
    return str(low) if low == 1 else f"{low}-{2 * low - 1}"


def slices(path: str, by: str, lines: int | None = None, derived: bool = False) -> list[dict[str, Any]]:
    """The rows of ``lmc stats --by BY`` for one log.

    Args:
        path: the log.
        by: ``"user"`` or ``"message-length"``.
        lines: only the first ``lines`` datums.
        derived: also the derived figures (``completion.ksr``).
    Raises:
        ValueError: an unknown ``by``.
        InputError: as :func:`lmchallenge.stats.state_of_log`.
    """
    if by not in BY:
        raise ValueError(f"unknown slice {by!r} (one of {', '.join(BY)})")
    summary = bootstrap.summarise(path, lines, by_message=by == "message-length")
    metrics = summary.metrics(derived)
    table = summary.table
    bins: dict[Any, np.ndarray] = {}
    counts: dict[Any, int] = {}
    for key, sums in zip(table.keys, table.sums):
        if by == "user":
            label = None if isinstance(key, tuple) else key    # (None, message): no user
        else:
            label = length_bin(int(sums[bootstrap.COLUMN["tokens"]]))
        bins[label] = bins.get(label, 0) + sums
        counts[label] = counts.get(label, 0) + 1
    if by == "user":
        order = sorted(bins, key=bootstrap.user_order)
        return [dict(log=path, user=u, **_figures(bins[u], metrics, derived)) for u in order]
    order = sorted(bins, key=lambda b: int(b.split("-")[0]))
    return [dict(log=path, message_length=b, messages=counts[b], **_figures(bins[b], metrics, derived))
            for b in order]


# --- per-token columns ---------------------------------------------------------------------------

@dataclass
class TokenColumns:
    """Collects the per-token outcomes of the column-wise pass (the interface of
    :class:`lmchallenge.stats.bootstrap.GroupSums` that :func:`lmchallenge.stats.state_of_log`
    feeds as ``groups``); ``wr`` outcomes are counted by :meth:`frame`."""

    parts: list[dict[str, np.ndarray]] = field(default_factory=list)
    rows: int = 0
    _datums: list[dict[str, Any]] = field(default_factory=list)
    _wr_rows: list[np.ndarray] = field(default_factory=list)
    _wr_pending: list[int] = field(default_factory=list)
    _wr_scores: reranking.ScoreMatrices = field(default_factory=reranking.ScoreMatrices)

    def update(self, datum: dict[str, Any]) -> None:
        if not datum.get("select", True):
            return
        single = bootstrap.GroupSums()
        single.update(datum)
        row: dict[str, Any] = dict(zip(bootstrap.COLUMNS, single.table().sums[0]))
        row.update(user=datum.get("user"), message=datum.get("message"))
        self._datums.append(row)
        if datum.get("results") is not None:
            self._wr_scores.add(*reranking.target_first(datum["target"], datum["results"]))
            self._wr_pending.append(self.rows)
        self.rows += 1

    def add_rows(self, users: list[str | int | None], user_codes: np.ndarray, messages: np.ndarray,
                 columns: dict[str, np.ndarray], wr: Any = None) -> None:
        self._flush()
        n = len(user_codes)
        part = {name: np.zeros(n) for name in bootstrap.COLUMNS}
        part.update({name: np.asarray(values, dtype=np.float64) for name, values in columns.items()})
        names = np.array(list(users) + [None], dtype=object)
        part["user"] = names[np.where(user_codes < 0, len(users), user_codes)]
        part["message"] = messages
        self.parts.append(part)
        if wr is not None and wr[0].shape[0]:
            self._wr_rows.append(np.arange(self.rows, self.rows + n))
            self._wr_scores.add_matrices(*wr)
        self.rows += n

    def _flush(self) -> None:
        if self._datums:
            self.parts.append({name: np.array([d[name] for d in self._datums],
                                              dtype=object if name == "user" else np.float64)
                               for name in self._datums[0]})
            self._datums = []
        if self._wr_pending:
            self._wr_rows.append(np.array(self._wr_pending, dtype=np.int64))
            self._wr_pending = []
            self._wr_scores.packed()     # rows stay in the order of _wr_rows

    def frame(self, model: reranking.InterpolationModel | None) -> Any:
        """The columns as a :class:`pandas.DataFrame` (one row per selected token), ``wr``
        tokens counted correct or not under ``model``."""
        import pandas as pd

        self._flush()
        frame = pd.concat([pd.DataFrame(p) for p in self.parts], ignore_index=True) if self.parts else pd.DataFrame(
            columns=["user", "message", *bootstrap.COLUMNS])
        chunks = self._wr_scores.packed()
        rows = np.concatenate(self._wr_rows) if self._wr_rows else np.zeros(0, dtype=np.int64)
        width = max((e.shape[1] for e, _ in chunks if e.shape[0]), default=0)
        start = 0
        base = np.zeros(len(frame))
        right = np.zeros(len(frame))
        for error, lm in chunks:
            where = rows[start:start + error.shape[0]]
            start += error.shape[0]
            base[where] = bootstrap.correct_rows(error, width, -np.inf)
            if model is not None:
                pad = model(np.float32(-np.inf), np.float32(-np.inf))
                right[where] = bootstrap.correct_rows(model(error, lm), width, pad)
        frame["base_correct"], frame["correct"] = base, right
        return frame[["user", "message", *bootstrap.COLUMNS]]


def token_table(path: str) -> Any:
    """One row per selected token of a log, with the outcomes ``lmc stats`` counts.

    Columns: ``user`` (None for plain text), ``message``; per token ``tokens`` (1),
    ``characters`` (target length), ``keystrokes`` (``characters + 1``), ``predicted``
    (target among the next-word predictions), ``hit1``/``hit3``/``hit10``/``hit20``
    (at rank <= N), ``srr`` (reciprocal rank, 0 if absent), ``completion_characters``
    (characters saved by completion), ``completion_tokens`` (completed), ``entropy_sum``
    (-logp in nats, 0 if not scored) and ``entropy_tokens`` (scored), ``base_correct``
    and ``correct`` (``wr``: Hit@1 by the error model alone / under the mixture fitted on
    the whole log).  Float columns (0/1 for flags).

    Raises:
        InputError: as :func:`lmchallenge.stats.state_of_log`.
    """
    from lmchallenge.stats.compute import state_of_log

    columns = TokenColumns()
    state = state_of_log(path, groups=columns)
    return columns.frame(reranking.fit(state.scores).model)
