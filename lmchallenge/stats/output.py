"""The statistics of several logs as text: one JSON object per line, CSV, or an aligned text
listing with units (``lmc stats -o``)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from lmchallenge.stats.derived import derived_figures

FIRST_CSV_COLUMNS = ("log", "fingerprint", "users", "messages_per_user", "tokens_per_user",
                     "characters_per_token", "skipped")


def flatten(nested: dict[str, Any], prefix: str = "", separator: str = ".") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (keys joined by ``separator``)."""
    flat: dict[str, Any] = {}
    for key, value in nested.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}{separator}", separator))
        else:
            flat[prefix + key] = value
    return flat


def to_json(rows: list[dict[str, Any]]) -> str:
    """One JSON object per line, keys sorted."""
    return "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)


def _bound_last(column: str) -> tuple[str, int]:
    """Sort key of a column: its name, an interval's ``.low`` before its ``.high``."""
    stem, _, last = column.rpartition(".")
    return (stem, ("low", "high").index(last)) if last in ("low", "high") else (column, -1)


def to_csv(rows: list[dict[str, Any]]) -> str:
    """CSV with the union of the rows' columns (logs of different games together): the
    general ones first, then the rest sorted; a row lacking a column leaves it empty."""
    flat = [flatten(row) for row in rows]
    order = {name: i for i, name in enumerate(FIRST_CSV_COLUMNS)}
    names = {name for row in flat for name in row}
    columns = sorted(names, key=lambda c: (order.get(c, len(order)), *_bound_last(c)))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    writer.writerows(flat)
    return out.getvalue()


UNITS = {
    "entropy.mean": "nats per scored token (cross-entropy)",
    "entropy.sum": "nats",
    "entropy.hit": "fraction of tokens scored",
    "prediction.mrr": "mean reciprocal rank",
    "prediction.hit": "fraction of tokens with the target among the predictions",
    "completion.characters": "fraction of characters saved (keystroke savings)",
    "completion.tokens": "fraction of tokens completed",
    "reranking.accuracy": "Hit@1 after reranking (LM Challenge 5.x fit)",
    "reranking.base_accuracy": "Hit@1 of the error model alone",
    "reranking.accuracy_at_least_base": "Hit@1 after reranking, never below the base",
    "skipped": "fraction of tokens not selected",
}
"""What the statistics of ``lmc stats -o text`` are, in words (Hit@N: ``prediction.hitN``)."""

RAW_UNITS = {
    "skipped": "tokens not selected",
    "prediction.srr": "sum of reciprocal ranks",
    "prediction.hit": "tokens with the target among the predictions",
    "completion.characters": "characters saved",
    "completion.tokens": "tokens completed",
    "entropy.sum": "nats (sum of -logp over the scored tokens)",
    "entropy.tokens": "tokens scored",
    "reranking.correct": "tokens right after reranking",
    "reranking.base_correct": "tokens right by the error model alone",
    "reranking.already_correct": "tokens typed right",
}
"""The same for the raw sums of ``lmc stats -H -o text`` (Hit@N: tokens with the target among
the first N predictions)."""


def stat_unit(name: str, raw: bool = False) -> str:
    """What the statistic ``name`` (flattened: ``entropy.mean``, ``prediction.hit3``) is, in
    words, as a ratio or, with ``raw``, as a raw sum (``lmc stats -H``); "" for the counts and
    ratios that need none (``users``, ``tokens_per_user``, ...)."""
    rank = name[len("prediction.hit"):] if name.startswith("prediction.hit") else ""
    if not rank:
        return (RAW_UNITS if raw else UNITS).get(name, "")
    return f"tokens with the target among the first {rank} predictions" if raw else f"Hit@{rank}"


def to_text(rows: list[dict[str, Any]]) -> str:
    """Each log as ``name  value  unit`` lines (a blank line between logs).

    A figure's bootstrap interval (the row's ``ci`` group, ``lmc stats --confidence``) is
    shown beside its value as ``[low, high]``, and its unit is the row's ``units`` group's
    (``--derived``) where it names one, else :func:`stat_unit`'s (QA: both groups were
    listed after the figures as lines of their own, ``ci.entropy.mean  [4.587199325923991,
    4.671933970479233]``, ``units.entropy.mean  nats per word``).  The mean cross-entropy is
    also given in bits and as perplexity (``exp`` of the mean in nats) unless the row has
    them as figures of their own (``--derived``).  The user of a ``--by user`` row is JSON
    (``null``, ``"7"`` and ``7`` are three users)."""
    blocks = []
    for row in rows:
        intervals, units = row.get("ci", {}), row.get("units", {})
        flat = flatten({key: value for key, value in row.items() if key not in ("ci", "units")})
        raw = "srr" in row.get("prediction", {})   # -H: sums (the ratios have mrr)
        shown = {name: _shown(name, value) + (f" {format_interval(intervals[name])}"
                                              if name in intervals else "")
                 for name, value in flat.items()}
        width = max(map(len, shown), default=0)
        lines = []
        for name, text in shown.items():
            unit = units.get(name) or stat_unit(name, raw)
            value = flat.get(name)
            if name == "entropy.mean" and isinstance(value, (int, float)) \
                    and "entropy.bits" not in flat:
                derived = derived_figures({name: value}, None)
                if derived:
                    unit += (f"; {derived['entropy.bits']:.6g} bits, perplexity "
                             f"{derived['entropy.perplexity']:.6g}")
            lines.append(f"{name:<{width}}  {text}" + (f"  {unit}" if unit else ""))
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def _shown(name: str, value: Any) -> str:
    """A figure of :func:`to_text`: floats to 6 significant digits, the user as JSON."""
    if name == "user":
        return json.dumps(value, ensure_ascii=False)
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def format_number(value: float | None, spec: str = ".6g") -> str:
    """``value`` in the format ``spec``; ``-`` for a missing or NaN one (an interval of one
    user: every resample's figure would be its own)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def format_interval(interval: Sequence[float | None], spec: str = ".6g") -> str:
    """``[low, high]``, each bound by :func:`format_number`."""
    return f"[{format_number(interval[0], spec)}, {format_number(interval[1], spec)}]"


OUTPUTS: dict[str, Callable[[list[dict[str, Any]]], str]] = {"json": to_json, "csv": to_csv,
                                                              "text": to_text}


__all__ = ["OUTPUTS", "UNITS", "RAW_UNITS", "stat_unit", "to_json", "to_csv", "to_text", "flatten",
           "format_number", "format_interval"]
