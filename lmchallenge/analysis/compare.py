"""``lmc compare``: models against a baseline on the same data, with intervals and paired tests.

For each log the figures of ``lmc stats`` that are ratios of per-group sums
(:data:`lmchallenge.stats.bootstrap.METRICS`) are given with their bootstrap interval; for each
non-baseline log, against the baseline, the paired difference (the same resampled
users/messages for both logs), its interval and a two-sided p-value (paired bootstrap, or
approximate randomisation), see :mod:`lmchallenge.stats.bootstrap`.

The logs must be of the same data: the check of ``lmc diff``
(:func:`lmchallenge.analysis.diff.pairs`: same tokens, same selection, same game).  Entropies
are compared only between logs with the same entropy fingerprint (the same tokens
scored); otherwise the entropy figures of that log carry a ``note`` saying why and no
difference.  Each ``wr`` log is scored under its own fitted mixture (see
:mod:`lmchallenge.stats.bootstrap` on what its interval leaves out).

Outputs (:data:`FORMATS`): ``text`` (a block per metric, a line per model in it),
``markdown`` (a table: models in rows, metrics in columns), ``csv`` (one row per log,
columns ``METRIC.value``, ``.low``, ``.high``, ``.delta``, ``.delta_low``, ``.delta_high``,
``.p``), ``json`` (one object per line per
non-baseline log: ``{"log", "baseline", "metrics": {key: {"value", "baseline", "delta",
"ci", "p", "value_ci", "baseline_ci"}}}``, ``ci`` being the interval of the delta; an
infinite or NaN figure is ``null``, its ``note`` saying why, so that the lines are standard
JSON) and
``html`` (one self-contained page).
"""

from __future__ import annotations

import csv
import html as html_escape
import io
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lmchallenge.analysis.diff import LogMismatchError, pairs
from lmchallenge.errors import LmcError
from lmchallenge.stats import bootstrap
from lmchallenge.stats.derived import derived_figures, entropy_game, unit_of
from lmchallenge.stats.output import format_interval, format_number

FORMATS = ("text", "markdown", "csv", "json", "html")
TESTS = ("bootstrap", "randomisation")
ENTROPY_KEYS = ("entropy.hit", "entropy.mean")
LOWER_IS_BETTER = frozenset({"entropy.mean"})
LOG = logging.getLogger(__name__)
"""Figures of :data:`lmchallenge.stats.bootstrap.METRICS` where a lower value is the better
model (cross-entropy); of every other, a higher value is."""


@dataclass
class MetricRow:
    """One metric of one log: ``value`` and its interval ``value_ci``; against the
    baseline ``baseline``, ``delta``, its interval ``ci`` and ``p`` (None for the baseline
    itself, or when not comparable: then ``note`` says why)."""

    value: float
    value_ci: list[float]
    baseline: float | None = None
    baseline_ci: list[float] | None = None
    delta: float | None = None
    ci: list[float] | None = None
    p: float | None = None
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = dict(value=self.value, baseline=self.baseline, delta=self.delta, ci=self.ci, p=self.p,
                   value_ci=self.value_ci, baseline_ci=self.baseline_ci)
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class LogComparison:
    """A log's figures (the baseline's own row has no deltas)."""

    log: str
    baseline: str
    metrics: dict[str, MetricRow] = field(default_factory=dict)
    game: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"log": self.log, "baseline": self.baseline,
                "metrics": {k: m.as_dict() for k, m in self.metrics.items()}}


def check_same_data(baseline: str, logs: Sequence[str]) -> str | None:
    """Check that every log is of the baseline's data (``lmc diff``'s check,
    :func:`lmchallenge.analysis.diff.pairs`, and for ``wr`` the same typos): column-wise
    where it can (:func:`lmchallenge.analysis.same_data.certainly_same`), otherwise reading
    the two logs side by side, datum by datum (the baseline once per log; neither is held
    in memory), which names the first difference.

    Args:
        baseline: path of the baseline log (any form ``lmc stats`` reads).
        logs: paths of the other logs.
    Returns:
        The game (None for an empty baseline).
    Raises:
        LogMismatchError: a log is not of the same data or game; the message starts with its path.
        InputError: a log cannot be read.
    """
    from lmchallenge.logs.io import first_datum, read_log
    from lmchallenge.analysis.pretty import detect_game
    from lmchallenge.analysis.same_data import certainly_same

    first = first_datum(baseline)
    reranking = first is not None and detect_game(first) == "wr"
    for log in logs:
        if certainly_same(baseline, log):
            continue
        try:
            for number, (a, b) in enumerate(pairs(read_log(baseline), read_log(log)), start=1):
                if reranking:
                    _same_typos(number, a, b)
        except LogMismatchError as error:
            raise LogMismatchError(f"{log}: {error}") from None
    return detect_game(first) if first is not None else None


def _same_typos(number: int, a: dict[str, Any], b: dict[str, Any]) -> None:
    """Check that two ``wr`` datums of the same token hold the same typo and candidates
    (with their error scores): logs corrupted with another seed (``-r``), or by LM Challenge
    5.2, differ in their typos, and a paired difference between them would measure those.

    Raises:
        LogMismatchError: the first token where they differ.
    """
    def typo(datum: dict[str, Any]) -> tuple[Any, list[list[Any]]]:
        return datum.get("verbatim"), [list(result[:2]) for result in datum.get("results") or ()]

    if typo(a) != typo(b):
        raise LogMismatchError(
            f"the logs are not of the same data: token {number} (user {a.get('user')!r}, message "
            f"{a.get('message')!r}, token {a.get('token')!r}) has the typo {a.get('verbatim')!r} "
            f"in BASELINE but {b.get('verbatim')!r} in LOG, or other candidates (wr logs compare "
            "only when made with the same corruption seed, -r, by the same implementation)")


def compare(baseline: str, logs: Sequence[str], settings: bootstrap.Settings,
            test: str = "bootstrap") -> list[LogComparison]:
    """Compare ``logs`` with ``baseline``.

    Args:
        baseline: the baseline log (any form ``lmc stats`` reads).
        logs: the other logs.
        settings: confidence, resamples, seed, interval method.
        test: ``"bootstrap"`` (paired bootstrap) or ``"randomisation"`` (approximate
            randomisation) for the p-values.
    Returns:
        The baseline's row first (no deltas), then one per log.
    Raises:
        LogMismatchError: a log is not of the baseline's data.
        InputError: a log cannot be read.
        LmcError: no log has a figure to compare.
    """
    game = check_same_data(baseline, logs)
    base = bootstrap.summarise(baseline)
    raw = base.result(human=False)
    game = entropy_game(game, raw["tokens"], raw["characters"])
    summaries = [bootstrap.summarise(log) for log in logs]
    # what any of the logs reports, the baseline's value too (0 where it has none): the
    # differences are taken against it
    present = {m for summary in (base, *summaries) for m in summary.metrics(derived=True)}
    metrics = [m for m in bootstrap.METRICS if m in present]
    base_values = {key: _value(base, num, den) for key, num, den in metrics}
    # the logs are of the baseline's data (the same users): its warnings are theirs
    base_ci = {key: bootstrap.held(bounds, base_values[key]) for key, bounds
               in bootstrap.intervals(base.table, metrics, settings).items()}
    groups = len(base.table.keys)
    if test == "bootstrap" and 1 < groups < bootstrap.FEW_GROUPS:
        # QA: two users whose scores moved alike gave p = 0.000999; --paired-ar gave 0.47
        LOG.warning("with only %d users (or messages) the paired bootstrap's p-values are too "
                    "small (a difference looks significant that may not be): --paired-ar's "
                    "are not (approximate randomisation)", groups)
    base_entropy = base.state.entropy_fingerprint
    base_totals = base.table.totals()
    rows = [LogComparison(baseline, baseline, {
        key: MetricRow(value, base_ci[key]) for key, value in base_values.items()}, game)]
    for log, summary in zip(logs, summaries):
        own_ci = bootstrap.intervals(summary.table, metrics, settings, warn=False)
        paired = bootstrap.paired(summary.table, base.table, metrics, settings, test)
        comparison = LogComparison(log, baseline, game=game)
        totals = summary.table.totals()
        for key, num, den in metrics:
            value = _value(summary, num, den)
            row = MetricRow(value, bootstrap.held(own_ci[key], value), baseline=base_values[key],
                            baseline_ci=base_ci[key])
            if key in ENTROPY_KEYS and summary.state.entropy_fingerprint != base_entropy:
                row.note = (f"not comparable: entropy fingerprints differ ({_hex(summary.state.entropy_fingerprint)}"
                            f" vs {_hex(base_entropy)} in the baseline): the logs score different tokens")
            elif _not_finite(row.value, totals, den) or _not_finite(row.baseline, base_totals, den):
                row.note = "not comparable: not finite (a log holds a NaN or infinite score)"
            else:
                result = paired[key]
                row.delta, row.ci, row.p = result.delta, result.ci, result.p
            comparison.metrics[key] = row
        rows.append(comparison)
    if not any(row.metrics for row in rows):
        raise LmcError(f"{baseline}: nothing to compare: no log has a figure lmc compare reports "
                       "(a wc log without a hit in its predictions or completions, a we or ce "
                       "log without a probability); lmc stats shows what they have")
    return rows


def _not_finite(value: float, totals: Any, denominator: str) -> bool:
    """Whether a log's figure ``value`` is NaN or infinite from its scores, not from nothing
    scored (0 / 0 is no figure, which the entropy fingerprints tell apart); ``totals``: the
    log's column totals (:meth:`lmchallenge.stats.bootstrap.GroupTable.totals`)."""
    return not math.isfinite(value) and bool(totals[bootstrap.COLUMN[denominator]])


def is_better(key: str, delta: float) -> bool:
    """Whether a (nonzero) difference ``delta`` = log - baseline in figure ``key`` makes the
    log the better model (:data:`LOWER_IS_BETTER`)."""
    return delta < 0 if key in LOWER_IS_BETTER else delta > 0


def _hex(fingerprint: int) -> str:
    return f"{fingerprint:08x}"


def _value(summary: bootstrap.LogSummary, numerator: str, denominator: str) -> float:
    """The figure as ``lmc stats`` prints it (its exact sums), else the ratio of the
    per-group totals."""
    key = next(m[0] for m in bootstrap.METRICS if m[1:] == (numerator, denominator))
    printed = bootstrap.lookup(summary.result(), key)
    if printed is not None:
        return float(printed)
    totals = summary.table.totals()
    den = totals[bootstrap.COLUMN[denominator]]
    return float(totals[bootstrap.COLUMN[numerator]] / den) if den else math.nan


# --- output ----------------------------------------------------------------------------------------

def _interval(ci: Sequence[float] | None) -> str:
    return "-" if ci is None else format_interval(ci, ".4f")


def _cell(row: MetricRow | None, is_baseline: bool) -> str:
    if row is None:
        return "-"
    text = f"{format_number(row.value, '.4f')} {_interval(row.value_ci)}"
    if is_baseline:
        return text
    if row.note:
        return f"{text} (not comparable)"
    p = "-" if row.p is None or math.isnan(row.p) else f"{row.p:.3g}"   # NaN: one user
    return f"{text} Δ {row.delta:+.4f} {_interval(row.ci)} p={p}"


def _columns(rows: Sequence[LogComparison]) -> list[str]:
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row.metrics if k not in keys]
    order = {m[0]: i for i, m in enumerate(bootstrap.METRICS)}
    return sorted(keys, key=lambda k: order[k])


def _header(key: str, game: str | None) -> str:
    unit = unit_of(key, game)
    return f"{key} ({unit})" if unit else key


def _notes(rows: Sequence[LogComparison]) -> list[str]:
    notes = []
    for row in rows[1:]:
        for key, metric in row.metrics.items():
            if metric.note and key == "entropy.mean":
                notes.append(f"{row.log}: entropy {metric.note}")
    return notes


def _legend(settings: bootstrap.Settings, test: str) -> str:
    return (f"{settings.confidence:g} {settings.method} bootstrap intervals over users (messages where "
            f"there are no users), {settings.resamples} resamples, seed {settings.seed}; Δ = log - baseline,"
            f" p two-sided ({'paired bootstrap' if test == 'bootstrap' else 'approximate randomisation'})")


def _derived_lines(rows: Sequence[LogComparison]) -> list[str]:
    lines = []
    for row in rows:
        figures = derived_figures({k: m.value for k, m in row.metrics.items()}, row.game)
        if figures:
            lines.append(f"{row.log}: " + ", ".join(f"{name} {value:.4g}" for name, value in figures.items()))
    return lines


def to_text(rows: Sequence[LogComparison], settings: bootstrap.Settings, test: str) -> str:
    """A block per figure (its name and unit), one aligned line per log under it: as wide as
    one log's figure whatever the number of figures (QA: a row per log, as ``markdown``
    has it, was 600 columns wide for ``wc``'s nine figures, each line wrapped in a terminal)."""
    keys = _columns(rows)
    game = rows[0].game if rows else None
    names = [f"{row.log} (baseline)" if i == 0 else row.log for i, row in enumerate(rows)]
    width = max(map(len, names), default=0)
    lines = []
    for key in keys:
        lines.append(_header(key, game))
        lines += [f"  {name.ljust(width)}  {_cell(row.metrics.get(key), i == 0)}"
                  for i, (name, row) in enumerate(zip(names, rows))]
    extra = _derived_lines(rows) + _notes(rows) + [_legend(settings, test)]
    return "\n".join(lines + [""] + extra) + "\n"


def to_markdown(rows: Sequence[LogComparison], settings: bootstrap.Settings, test: str) -> str:
    """A Markdown (pipe) table."""
    keys = _columns(rows)
    game = rows[0].game if rows else None
    lines = ["| log | " + " | ".join(_header(k, game) for k in keys) + " |",
             "|---|" + "---|" * len(keys)]
    for i, row in enumerate(rows):
        name = f"{row.log} (baseline)" if i == 0 else row.log
        cells = [_cell(row.metrics.get(k), i == 0).replace("|", "\\|") for k in keys]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    extra = _derived_lines(rows) + _notes(rows) + [_legend(settings, test)]
    return "\n".join(lines + [""] + [f"- {e}" for e in extra]) + "\n"


def to_csv(rows: Sequence[LogComparison], settings: bootstrap.Settings, test: str) -> str:
    """One CSV row per log."""
    keys = _columns(rows)
    fields = ["log", "baseline"]
    for k in keys:
        fields += [f"{k}.{s}" for s in ("value", "low", "high", "delta", "delta_low", "delta_high", "p", "note")]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields)
    writer.writeheader()
    for row in rows:
        record: dict[str, Any] = {"log": row.log, "baseline": row.baseline}
        for k, m in row.metrics.items():
            record.update({f"{k}.value": m.value, f"{k}.low": m.value_ci[0], f"{k}.high": m.value_ci[1],
                           f"{k}.delta": m.delta, f"{k}.p": m.p, f"{k}.note": m.note,
                           f"{k}.delta_low": m.ci[0] if m.ci else None,
                           f"{k}.delta_high": m.ci[1] if m.ci else None})
        writer.writerow(record)
    return out.getvalue()


def to_json(rows: Sequence[LogComparison], settings: bootstrap.Settings, test: str) -> str:
    """One JSON object per line per non-baseline log (keys sorted; standard JSON: an
    infinite or NaN figure is ``null``, QA: ``jq`` refused ``Infinity``)."""
    return "".join(json.dumps(_standard(row.as_json()), sort_keys=True, allow_nan=False) + "\n"
                   for row in rows[1:])


def _standard(value: Any) -> Any:
    """``value`` (nested dicts, lists, scalars) with every non-finite float as None."""
    if isinstance(value, dict):
        return {key: _standard(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_standard(item) for item in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def to_html(rows: Sequence[LogComparison], settings: bootstrap.Settings, test: str) -> str:
    """One self-contained HTML page (inline CSS, no scripts, no external resources)."""
    keys = _columns(rows)
    game = rows[0].game if rows else None
    esc = html_escape.escape
    head = "".join(f"<th>{esc(_header(k, game))}</th>" for k in keys)
    body = []
    for i, row in enumerate(rows):
        cells = []
        for k in keys:
            metric = row.metrics.get(k)
            css = ""
            if i and metric is not None and metric.p is not None and metric.delta \
                    and metric.p < 1 - settings.confidence:
                css = f" class=\"{'better' if is_better(k, metric.delta) else 'worse'}\""
            cells.append(f"<td{css}>{esc(_cell(metric, i == 0))}</td>")
        name = esc(row.log) + (" <em>(baseline)</em>" if i == 0 else "")
        body.append(f"<tr><th scope=\"row\">{name}</th>{''.join(cells)}</tr>")
    colours = (f"green: the log is significantly better than the baseline (p < {1 - settings.confidence:.3g}; "
               f"better is lower for {', '.join(sorted(LOWER_IS_BETTER))}, higher for the other "
               "figures), red: significantly worse")
    notes = "".join(f"<li>{esc(n)}</li>" for n in
                    _derived_lines(rows) + _notes(rows) + [_legend(settings, test), colours])
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>lmc compare</title><style>"
            "body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}"
            "th,td{border:1px solid #bbb;padding:.3em .6em;text-align:left;font-variant-numeric:tabular-nums}"
            "td.better{background:#d8f5d0}td.worse{background:#f8d6d3}"
            "</style></head><body data-rendered=\"1\"><h1>lmc compare</h1>"
            f"<table id=\"comparison\"><thead><tr><th>log</th>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table><ul id=\"notes\">{notes}</ul></body></html>\n")


WRITERS: dict[str, Callable[[Sequence[LogComparison], bootstrap.Settings, str], str]] = {
    "text": to_text, "markdown": to_markdown, "csv": to_csv, "json": to_json, "html": to_html}
