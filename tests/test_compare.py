"""`lmc compare` (lmchallenge.analysis.compare): paired comparisons against a baseline, every output
format, the same-data check of `lmc diff`, entropies only with equal fingerprints."""

from __future__ import annotations

import csv
import io
import json
import math
import re

import numpy as np
import pytest

from lmchallenge.stats import bootstrap
from lmchallenge.logs.io import read_log
from conftest import REPO
from test_stats import run_lmc, write_jsonl

PRETTY = REPO / "tests" / "data" / "pretty"
GAMES = ("wc", "we", "ce", "wr")


def compare_json(*args: str) -> list[dict]:
    out = run_lmc("compare", "-o", "json", "--resamples", "300", *args).stdout.decode()
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.parametrize("game", GAMES)
def test_a_log_against_itself_has_no_difference(game):
    path = str(PRETTY / f"kjv.o1.{game}.jsonl")
    [row] = compare_json(path, path)
    assert row["log"] == row["baseline"] == path
    assert row["metrics"]
    stats = json.loads(run_lmc("stats", "--confidence", "0.95", "--resamples", "300", path).stdout)
    for key, metric in row["metrics"].items():
        assert metric["delta"] == 0, key
        assert metric["p"] == 1, key
        assert metric["ci"] == [0, 0], key
        assert metric["value"] == metric["baseline"]
        group, field = key.split(".")
        if field != "ksr":    # derived: not in lmc stats' output
            assert metric["value"] == stats[group][field]
            assert metric["value_ci"] == pytest.approx(stats["ci"][key], rel=1e-12)


@pytest.mark.parametrize("test", ["bootstrap", "randomisation"])
def test_the_same_sums_added_in_another_order_are_no_difference(test):
    """An lmc-dist run adds a user's sums over partitions, so its sums may differ from the
    single-process log's in the last bits: still no difference, p = 1 (was -0.0000, p < 1)."""
    table = bootstrap.summarise(str(PRETTY / "kjv.o1.we.jsonl")).table
    noisy = bootstrap.GroupTable(table.keys, table.sums * (1 + 4e-16 * np.sign(np.sin(np.arange(table.sums.size))))
                                 .reshape(table.sums.shape))
    assert not np.array_equal(noisy.sums, table.sums)
    metrics = [("entropy.mean", "entropy_sum", "entropy_tokens")]
    [same] = bootstrap.paired(noisy, table, metrics, bootstrap.Settings(0.95, 300), test).values()
    assert (same.delta, same.ci, same.p) == (0, [0, 0], 1)
    # a real difference is still one
    changed = bootstrap.GroupTable(table.keys, table.sums.copy())
    changed.sums[0, bootstrap.COLUMN["entropy_sum"]] *= 1 + 1e-6
    [other] = bootstrap.paired(changed, table, metrics, bootstrap.Settings(0.95, 300), test).values()
    assert other.delta > 0


def test_a_better_model_is_significantly_better():
    base, log = str(PRETTY / "kjv.o1.wc.jsonl"), str(PRETTY / "kjv.o2.wc.jsonl")
    [row] = compare_json(base, log)
    mrr = row["metrics"]["prediction.mrr"]
    assert mrr["delta"] == pytest.approx(mrr["value"] - mrr["baseline"])
    assert mrr["delta"] > 0 and mrr["ci"][0] > 0
    assert mrr["p"] == pytest.approx(1 / 301)      # no resample reaches the null
    # the same figures from the library, paired resampling of the same groups
    one, two = bootstrap.summarise(base), bootstrap.summarise(log)
    paired = bootstrap.paired(two.table, one.table, [("prediction.mrr", "srr", "tokens")], bootstrap.Settings(0.95, 300))
    assert paired["prediction.mrr"].ci == pytest.approx(mrr["ci"], rel=1e-12)
    ar = compare_json("--paired-ar", base, log)[0]["metrics"]["prediction.mrr"]
    assert 0 < ar["p"] <= 1 and ar["ci"] == mrr["ci"]


def test_html_marks_a_lower_cross_entropy_better_and_a_higher_one_worse(tmp_path):
    """The page coloured a log 1 nat a word worse than its baseline green ("better")."""
    base = PRETTY / "kjv.o1.we.jsonl"
    data = list(read_log(str(base)))
    for datum in data:
        if datum["logp"] is not None:
            datum["logp"] -= 1.0
    worse = write_jsonl(tmp_path / "worse.we.jsonl", data)
    classes = {}
    for name, (one, two) in {"worse": (base, worse), "better": (worse, base)}.items():
        page = run_lmc("compare", "-o", "html", "--resamples", "200", str(one), str(two)).stdout.decode()
        classes[name] = re.findall(r'<td class="(\w+)">([^<]*)', page)
        assert "better is lower for entropy.mean" in page
    [(css, cell)] = classes["worse"]      # entropy.hit is the same: not marked
    assert css == "worse" and "Δ +1.0000" in cell
    [(css, cell)] = classes["better"]
    assert css == "better" and "Δ -1.0000" in cell
    # and a higher figure of the others is better
    page = run_lmc("compare", "-o", "html", "--resamples", "200", str(PRETTY / "kjv.o1.wc.jsonl"),
                   str(PRETTY / "kjv.o2.wc.jsonl")).stdout.decode()
    assert re.search(r'<td class="better">[^<]*Δ \+', page)
    assert not re.search(r'<td class="better">[^<]*Δ -', page)


def test_entropies_with_other_fingerprints_are_not_compared(tmp_path):
    base = PRETTY / "kjv.o1.we.jsonl"
    data = list(read_log(str(base)))
    data[3]["logp"] = None        # one token not scored: another entropy fingerprint
    other = write_jsonl(tmp_path / "other.we.jsonl", data)
    [row] = compare_json(str(base), str(other))
    for key in ("entropy.mean", "entropy.hit"):
        metric = row["metrics"][key]
        assert metric["delta"] is None and metric["p"] is None and metric["ci"] is None
        assert metric["note"].startswith("not comparable: entropy fingerprints differ")
    text = run_lmc("compare", "--resamples", "100", str(base), str(other)).stdout.decode()
    assert "(not comparable)" in text
    assert f"{other}: entropy not comparable: entropy fingerprints differ" in text


def test_an_infinite_score_is_null_in_standard_json(tmp_path):
    # QA: "value": Infinity and "value_ci": [NaN, NaN] in the json lines, which jq refused
    base = PRETTY / "kjv.o1.we.jsonl"
    data = list(read_log(str(base)))
    data[3]["logp"] = -math.inf
    other = write_jsonl(tmp_path / "inf.we.jsonl", data)
    out = run_lmc("compare", "-o", "json", "--resamples", "300", str(base), str(other)).stdout.decode()
    [row] = [json.loads(line, parse_constant=lambda name: pytest.fail(f"not standard JSON: {name}"))
             for line in out.splitlines()]
    metric = row["metrics"]["entropy.mean"]
    assert metric["value"] is None and metric["delta"] is None and metric["ci"] is None
    assert metric["note"] == "not comparable: not finite (a log holds a NaN or infinite score)"
    low, high = metric["value_ci"]
    assert low > 0 and high is None     # some resamples do not draw the infinite token's user


def test_logs_of_other_data_are_refused(tmp_path):
    base, same, other = (str(PRETTY / name) for name in ("kjv.o1.we.jsonl", "kjv.o2.we.jsonl", "rails.we.jsonl"))
    for logs in ([other], [same, other]):
        result = run_lmc("compare", base, *logs, check=False)
        assert result.returncode == 2 and result.stdout == b""
        assert result.stderr.decode() == (f"lmc: error: {other}: the logs are not of the same data: token 1 (user "
                                          "None, message 0, token 0) has user None in BASELINE but '00b65b5faa16' in LOG\n")
    result = run_lmc("compare", str(PRETTY / "kjv.o1.we.jsonl"), str(PRETTY / "kjv.o1.ce.jsonl"), check=False)
    assert result.returncode == 2 and b"Traceback" not in result.stderr


def test_wr_logs_with_other_typos_are_refused(tmp_path):
    """wr logs made with another corruption seed (or by LM Challenge 5.2) hold other typos:
    a paired difference between them measured the typos (base_accuracy Δ +0.019, exit 0)."""
    base = PRETTY / "kjv.o1.wr.jsonl"
    data = list(read_log(str(base)))
    number = next(i for i, d in enumerate(data, start=1) if d.get("verbatim"))
    datum = data[number - 1]
    datum["verbatim"] = datum["verbatim"] + "x"
    other = write_jsonl(tmp_path / "other.wr.jsonl", data)
    result = run_lmc("compare", str(base), str(other), check=False)
    assert result.returncode == 2 and result.stdout == b""
    assert result.stderr.decode().startswith(
        f"lmc: error: {other}: the logs are not of the same data: token {number} (user "
        f"{datum['user']!r}, message {datum['message']}, token {datum['token']}) has the typo ")
    assert "same corruption seed, -r" in result.stderr.decode()
    # another model's scores of the same candidates are what is compared
    data = list(read_log(str(base)))
    for d in data:
        d["results"] = [[r[0], r[1], None if r[2] is None else r[2] - 0.5] for r in d["results"]]
    rescored = write_jsonl(tmp_path / "rescored.wr.jsonl", data)
    assert run_lmc("compare", "--resamples", "50", str(base), str(rescored), check=False).returncode == 0


def test_text_markdown_csv_and_html_outputs():
    base, log = str(PRETTY / "kjv.o1.we.jsonl"), str(PRETTY / "kjv.o2.we.jsonl")
    args = ("--resamples", "200", base, log)
    text = run_lmc("compare", *args).stdout.decode()
    lines = text.splitlines()
    # a block per figure, a line per log (QA: a row per log was 600 columns wide for wc)
    value, delta = r"\d\.\d{4} \[\d\.\d{4}, \d\.\d{4}\]", r"Δ [+-]\d\.\d{4} \[-?\d\.\d{4}, -?\d\.\d{4}\] p=[\d.e-]+"
    pad = " " * len(" (baseline)")
    for first, figure in ((0, "entropy.hit"), (3, "entropy.mean (nats per word)")):
        assert lines[first] == figure
        assert re.fullmatch(rf"  {re.escape(base)} \(baseline\)  {value}", lines[first + 1])
        assert re.fullmatch(rf"  {re.escape(log)}{pad}  {value} {delta}", lines[first + 2])
    assert lines[6] == ""
    assert lines[7].startswith(f"{base}: entropy.bits ") and "entropy.perplexity" in lines[7]
    assert lines[-1].startswith("0.95 percentile bootstrap intervals over users")
    markdown = run_lmc("compare", "-o", "markdown", *args).stdout.decode().splitlines()
    assert markdown[0].startswith("| log | entropy.hit | entropy.mean (nats per word) |")
    assert markdown[1] == "|---|---|---|"
    rows = list(csv.DictReader(io.StringIO(run_lmc("compare", "-o", "csv", *args).stdout.decode())))
    assert [r["log"] for r in rows] == [base, log]
    assert rows[0]["entropy.mean.delta"] == "" and float(rows[1]["entropy.mean.p"]) <= 1
    low, value, high = (float(rows[1][f"entropy.mean.{k}"]) for k in ("low", "value", "high"))
    assert low <= value <= high
    html = run_lmc("compare", "-o", "html", *args).stdout.decode()
    assert html.startswith("<!DOCTYPE html>") and "<table id=\"comparison\">" in html
    assert "http" not in html and "<script" not in html      # self-contained


def test_perplexity_and_bits_follow_the_mean():
    from lmchallenge.stats.derived import derived_figures, derived_intervals

    figures = derived_figures({"entropy.mean": 2.0}, "we")
    assert figures == {"entropy.bits": pytest.approx(2 / math.log(2)), "entropy.perplexity": pytest.approx(math.exp(2))}
    assert derived_intervals({"entropy.mean": [1.0, 2.0]})["entropy.perplexity"] == pytest.approx(
        [math.e, math.exp(2)])


def test_ksr_is_the_presage_rate():
    """KSR = 1 - ki / kn, kn = every word and a space, ki = typed + one selection per
    completed word (worked out by hand on the log's datums)."""
    path = PRETTY / "kjv.o1.wc.jsonl"
    data = list(read_log(str(path)))
    kn = ki = 0
    for datum in data:
        target = datum["target"]
        kn += len(target) + 1
        typed = next((j for j, cs in enumerate(datum["completions"]) if target[j:] in cs[:2]), None)
        ki += len(target) + 1 if typed is None else typed + 1
    [row] = compare_json(str(path), str(path))
    assert row["metrics"]["completion.ksr"]["value"] == pytest.approx(1 - ki / kn, rel=1e-12)


def test_logs_with_nothing_to_compare_are_an_error_not_an_empty_table(tmp_path):
    """A wc log whose one word is neither predicted nor completed has no figure lmc compare
    reports (lmc stats prints none either): it said so with an empty table and exit 0."""
    log = tmp_path / "nothing.wc.jsonl"
    write_jsonl(log, [{"user": None, "message": 0, "token": 0, "character": 0, "target": "zzzq",
                       "completions": [["And", "The"], ["eal"], [], []]}])
    result = run_lmc("compare", str(log), str(log), check=False)
    assert result.returncode == 2 and result.stdout == b""
    assert result.stderr.decode() == (
        f"lmc: error: {log}: nothing to compare: no log has a figure lmc compare reports (a wc "
        "log without a hit in its predictions or completions, a we or ce log without a "
        "probability); lmc stats shows what they have\n")


def test_a_baseline_without_a_figure_of_the_logs_shows_it_as_zero(tmp_path):
    """A baseline wc log that predicts nothing has no prediction or completion figures of
    its own: its row showed '-' where the differences were taken against 0, and the warning
    about the data was not given."""
    log = PRETTY / "kjv.o1.wc.jsonl"
    data = list(read_log(str(log)))
    for datum in data:
        datum["completions"] = [[] for _ in datum["completions"]]
    nothing = write_jsonl(tmp_path / "nothing.wc.jsonl", data)
    result = run_lmc("compare", "--resamples", "400", str(nothing), str(log))
    assert result.stderr.decode().startswith("WARNING\tonly ")
    lines = result.stdout.decode().splitlines()
    base_rows = [line for line in lines if line.startswith(f"  {nothing} (baseline)")]
    assert len(base_rows) == 9 and "prediction.mrr" in lines     # every figure of wc
    for base_row in base_rows:
        assert "-" not in base_row[len(f"  {nothing} (baseline)"):].split()
    [row] = compare_json(str(nothing), str(log))
    mrr = row["metrics"]["prediction.mrr"]
    assert mrr["baseline"] == 0 and mrr["baseline_ci"] == [0, 0]
    assert mrr["delta"] == pytest.approx(mrr["value"], rel=1e-12) and mrr["value"] > 0


def test_a_warning_about_the_data_is_given_once_for_all_logs():
    path = str(PRETTY / "kjv.o1.ce.jsonl")
    few = bootstrap.summarise(path).table.keys
    assert len(few) < bootstrap.FEW_GROUPS
    result = run_lmc("compare", path, path, path)
    assert result.stderr.decode() == (
        f"WARNING\tonly {len(few)} users (or messages) to resample: the bootstrap intervals are rough\n"
        f"WARNING\twith only {len(few)} users (or messages) the paired bootstrap's p-values are too "
        "small (a difference looks significant that may not be): --paired-ar's are not "
        "(approximate randomisation)\n")
    assert run_lmc("compare", "--paired-ar", path, path).stderr.decode() == (
        f"WARNING\tonly {len(few)} users (or messages) to resample: the bootstrap intervals are rough\n")


def we_users(path, users: int, scale: float):
    """A we log of ``users`` users of 5 tokens each, every score times ``scale``."""
    return write_jsonl(path, [{"user": f"u{u}", "message": 0, "token": t, "character": 2 * t,
                               "target": "ab", "logp": -scale * (1 + t % 2 + u % 3)}
                              for u in range(users) for t in range(5)])


def test_one_user_has_no_interval_nor_p_value(tmp_path):
    """QA: a model 0.1% better on one user (or one token) was 'significant', p = 0.000999,
    green in the HTML page: every resample is that one user, so every resampled difference
    was the difference."""
    base, log = we_users(tmp_path / "a.jsonl", 1, 1.0), we_users(tmp_path / "b.jsonl", 1, 0.999)
    for test in ([], ["--paired-ar"]):
        [row] = compare_json(*test, str(base), str(log))
        mean = row["metrics"]["entropy.mean"]
        assert mean["delta"] == pytest.approx(-0.0014)
        assert (mean["ci"], mean["p"], mean["value_ci"], mean["baseline_ci"]) == ([None] * 2, None, [None] * 2, [None] * 2)
    text = run_lmc("compare", str(base), str(log))
    rows = [line for line in text.stdout.decode().splitlines() if line.startswith(f"  {log} ")]
    assert [row[len(f"  {log}"):].strip() for row in rows] == [
        "1.0000 [-, -] Δ +0.0000 [-, -] p=-", "1.3986 [-, -] Δ -0.0014 [-, -] p=-"]
    assert text.stderr.decode() == ("WARNING\tonly 1 user (or message) to resample: the bootstrap "
                                    "intervals are NaN (every resample's figure would be its own)\n")
    page = run_lmc("compare", "-o", "html", str(base), str(log)).stdout.decode()
    assert "Δ -0.0014" in page and 'class="better"' not in page and 'class="worse"' not in page


def test_randomisation_counts_the_trials_that_give_the_difference_itself(tmp_path):
    """QA: with 2 users, a trial that swaps both users (or neither) gives the observed
    difference summed in another order; half of those fell short of it by the last bit, and
    --paired-ar gave p = 0.211 where a quarter of trials swap neither and a quarter both
    (p about 0.5; the bootstrap's 0.000999 is the reason for the warning above)."""
    base, log = we_users(tmp_path / "a.jsonl", 2, 1.0), we_users(tmp_path / "b.jsonl", 2, 0.99)
    [row] = compare_json("--paired-ar", "--resamples", "1000", str(base), str(log))
    assert 0.45 < row["metrics"]["entropy.mean"]["p"] < 0.55

