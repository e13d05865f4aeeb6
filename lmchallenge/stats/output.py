"""The statistics of several logs as text: one JSON object per line, CSV, or an aligned text
listing with units (``lmc stats -o``)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
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
    """Each log as ``name  value  unit`` lines (a blank line between logs); the mean
    cross-entropy also in bits and as perplexity (``exp`` of the mean in nats); the user of a
    ``--by user`` row as JSON (``null``, ``"7"`` and ``7`` are three users)."""
    blocks = []
    for row in rows:
        flat = flatten(row)
        width = max(map(len, flat), default=0)
        raw = "srr" in row.get("prediction", {})   # -H: sums (the ratios have mrr)
        lines = []
        for name, value in flat.items():
            unit = stat_unit(name, raw)
            if name == "entropy.mean" and isinstance(value, (int, float)):
                derived = derived_figures({name: value}, None)
                if derived:
                    unit += (f"; {derived['entropy.bits']:.6g} bits, perplexity "
                             f"{derived['entropy.perplexity']:.6g}")
            shown = (json.dumps(value, ensure_ascii=False) if name == "user" else
                     f"{value:.6g}" if isinstance(value, float) else str(value))
            lines.append(f"{name:<{width}}  {shown}" + (f"  {unit}" if unit else ""))
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


OUTPUTS: dict[str, Callable[[list[dict[str, Any]]], str]] = {"json": to_json, "csv": to_csv,
                                                              "text": to_text}


__all__ = ["OUTPUTS", "UNITS", "RAW_UNITS", "stat_unit", "to_json", "to_csv", "to_text", "flatten"]
