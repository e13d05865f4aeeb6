"""Bootstrap intervals of `lmc stats --confidence` (lmchallenge.stats.bootstrap): per-group sums
equal on every reading path and to the statistics, intervals against scipy.stats.bootstrap,
coverage on simulated data, the command line (default output unchanged)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from lmchallenge.stats import bootstrap, output
from lmchallenge.cli import uncertainty as uncertainty_cli
from lmchallenge.logs.io import read_log
from lmchallenge.logs.parquet import write_parquet
from conftest import REPO
from test_stats import run_lmc

LOGS = REPO / "tests" / "data" / "logs"
FIXTURES = sorted(p for p in LOGS.glob("*.*.jsonl"))


@pytest.fixture(scope="module")
def parquet_copies(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("parquet")
    copies = {}
    for path in FIXTURES:
        copies[path.name] = out / path.name.replace(".jsonl", ".parquet")
        write_parquet(list(read_log(str(path))), str(copies[path.name]))
    return copies


def table_of(**columns: np.ndarray) -> bootstrap.GroupTable:
    groups = len(next(iter(columns.values())))
    sums = np.zeros((groups, len(bootstrap.COLUMNS)))
    for name, values in columns.items():
        sums[:, bootstrap.COLUMN[name]] = values
    return bootstrap.GroupTable(list(range(groups)), sums)


# --- per-group sums ----------------------------------------------------------------------------

@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_group_sums_agree_on_every_path_and_add_up_to_the_statistics(path, parquet_copies):
    columnar = bootstrap.summarise(str(path))
    datum_by_datum = bootstrap.summarise(str(path), lines=10**9)
    parquet = bootstrap.summarise(str(parquet_copies[path.name]))
    for other in (datum_by_datum, parquet):
        assert other.table.keys == columnar.table.keys
        np.testing.assert_allclose(other.table.sums, columnar.table.sums, rtol=1e-12, atol=0)
    raw = columnar.result(human=False)
    totals = dict(zip(bootstrap.COLUMNS, columnar.table.totals()))
    assert totals["tokens"] == raw["tokens"]
    assert totals["characters"] == raw["characters"]
    assert totals["predicted"] == raw["prediction"]["hit"]
    assert [totals[f"hit{n}"] for n in (1, 3, 10, 20)] == [raw["prediction"][f"hit{n}"] for n in (1, 3, 10, 20)]
    assert totals["srr"] == pytest.approx(raw["prediction"]["srr"], rel=1e-12, abs=0)
    assert totals["completion_characters"] == raw["completion"]["characters"]
    assert totals["completion_tokens"] == raw["completion"]["tokens"]
    assert totals["entropy_sum"] == pytest.approx(raw["entropy"]["sum"], rel=1e-12, abs=0)
    assert totals["entropy_tokens"] == raw["entropy"]["tokens"]
    assert totals["correct"] == raw["reranking"]["correct"]
    assert totals["base_correct"] == raw["reranking"].get("base_correct", 0)
    # groups: users, or messages where the user is null
    users = {d.get("user") for d in read_log(str(path))}
    if None in users:
        assert all(isinstance(k, tuple) and k[0] is None for k in columnar.table.keys)
    else:
        assert columnar.table.keys == sorted(users)


def test_merging_pieces_equals_one_pass():
    data = list(read_log(str(LOGS / "rails.wr.jsonl")))
    whole, first, second = bootstrap.GroupSums(), bootstrap.GroupSums(), bootstrap.GroupSums()
    for datum in data:
        whole.update(datum)
    for datum in data[:333]:
        first.update(datum)
    for datum in data[333:]:
        second.update(datum)
    first.merge(second)
    for sums in (whole, first):
        sums.finish(bootstrap.reranking.InterpolationModel(0.3, -5.0))
    np.testing.assert_allclose(first.table().sums, whole.table().sums, rtol=1e-12)
    assert first.table().keys == whole.table().keys


# --- intervals -----------------------------------------------------------------------------------

def simulated_groups(rng: np.random.Generator, groups: int, rate: float = 0.3) -> bootstrap.GroupTable:
    """Groups of 1..29 tokens, each group with its own rate (Beta, mean ``rate``)."""
    tokens = rng.integers(1, 30, groups)
    hits = rng.binomial(tokens, rng.beta(10 * rate, 10 * (1 - rate), groups))
    return table_of(tokens=tokens, hit1=hits)


@pytest.mark.parametrize("method,scipy_method", [("percentile", "percentile"), ("bca", "BCa")])
@pytest.mark.parametrize("data,numerator", [("simulated", "hit1"), ("kjv.wc.jsonl", "completion_characters")])
def test_intervals_agree_with_scipy_bootstrap(method, scipy_method, data, numerator):
    """Against scipy.stats.bootstrap over the same per-group sums (simulated groups, and
    the 30 messages of a real log: characters saved by completion / characters)."""
    if data == "simulated":
        table, denominator = simulated_groups(np.random.default_rng(3), 80), "tokens"
    else:
        table, denominator = bootstrap.summarise(str(LOGS / data)).table, "characters"
    hits, tokens = table.sums[:, bootstrap.COLUMN[numerator]], table.sums[:, bootstrap.COLUMN[denominator]]
    ours = bootstrap.intervals(table, [("prediction.hit1", numerator, denominator)],
                       bootstrap.Settings(0.95, 20000, 1, method))["prediction.hit1"]
    theirs = scipy.stats.bootstrap(
        (hits, tokens), lambda h, n, axis=-1: h.sum(axis=axis) / n.sum(axis=axis),
        paired=True, vectorized=True, n_resamples=20000, confidence_level=0.95,
        method=scipy_method, random_state=np.random.default_rng(2)).confidence_interval
    width = theirs.high - theirs.low
    # Monte Carlo error of a 2.5% quantile from 20,000 resamples: about 1% of the width
    assert abs(ours[0] - theirs.low) < 0.04 * width
    assert abs(ours[1] - theirs.high) < 0.04 * width


def coverage(repetitions: int = 1000, groups: int = 200, rate: float = 0.3) -> int:
    """In how many of ``repetitions`` simulated logs the 95% percentile interval holds
    the true rate."""
    rng = np.random.default_rng(11)
    covered = 0
    for repetition in range(repetitions):
        table = simulated_groups(rng, groups, rate)
        low, high = bootstrap.intervals(table, [("hit1", "hit1", "tokens")],
                                bootstrap.Settings(0.95, 400, repetition))["hit1"]
        covered += low <= rate <= high
    return covered


def test_coverage_on_simulated_data_is_nominal():
    """1,000 simulated logs of 200 groups with a known rate 0.3: the 95% percentile
    interval holds it in 93-97% of them (Monte Carlo standard error 0.7 points).  Run in a
    process with one BLAS thread, as `lmc stats` runs (thousands of small matrix products:
    BLAS threads only wait for each other)."""
    code = "import test_bootstrap; print(test_bootstrap.coverage())"
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent, capture_output=True,
                          text=True, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert 930 <= int(done.stdout) <= 970


def test_resampling_is_reproducible_and_independent_of_threads(monkeypatch):
    table = simulated_groups(np.random.default_rng(5), 50)
    metric = [("hit1", "hit1", "tokens")]
    whole = bootstrap.intervals(table, metric, bootstrap.Settings(0.9, 300, 4))
    again = bootstrap.intervals(table, metric, bootstrap.Settings(0.9, 300, 4))
    assert whole == again
    assert bootstrap.intervals(table, metric, bootstrap.Settings(0.9, 300, 5)) != whole
    settings = bootstrap.Settings(0.9, 100, 4)
    one_thread = bootstrap.resampled_totals(table.sums, settings)
    assert one_thread.shape == (100, table.sums.shape[1])
    monkeypatch.setattr(bootstrap, "PARALLEL_DRAWS", 0)        # every table on several threads
    monkeypatch.setattr(bootstrap.os, "cpu_count", lambda: 4)
    assert np.array_equal(bootstrap.resampled_totals(table.sums, settings), one_thread)
    assert bootstrap.intervals(table, metric, bootstrap.Settings(0.9, 300, 4)) == whole
    # each resample draws 50 groups: the totals of a column of ones count them
    ones = np.ones((50, 1))
    assert (bootstrap.resampled_totals(ones, settings) == 50).all()
    assert (bootstrap.resampled_totals(np.zeros((0, 3)), settings) == 0).all()
    # many groups: each block draws a few resamples at a time (here 5 of its 32)
    monkeypatch.setattr(bootstrap, "DRAWN_CELLS", 50 * 5)
    threaded = bootstrap.resampled_totals(table.sums, settings)
    assert (bootstrap.resampled_totals(ones, settings) == 50).all()
    monkeypatch.setattr(bootstrap, "PARALLEL_DRAWS", 1 << 40)
    assert np.array_equal(bootstrap.resampled_totals(table.sums, settings), threaded)


def test_settings_are_checked():
    table = simulated_groups(np.random.default_rng(5), 5)
    with pytest.raises(ValueError, match="unknown interval method"):
        bootstrap.intervals(table, [("hit1", "hit1", "tokens")], bootstrap.Settings(method="studentised"))
    assert uncertainty_cli.METHODS == bootstrap.METHODS
    assert (uncertainty_cli.DEFAULT_RESAMPLES, uncertainty_cli.DEFAULT_SEED) == (
        bootstrap.Settings().resamples, bootstrap.Settings().seed)


# --- the command line ------------------------------------------------------------------------------

EXPECTED_CI = {
    "kjv.wc.jsonl": {"prediction.hit", "prediction.hit1", "prediction.hit3", "prediction.hit10",
                     "prediction.hit20", "prediction.mrr", "completion.characters", "completion.tokens"},
    "rails.we.jsonl": {"entropy.hit", "entropy.mean"},
    "kjv.ce.jsonl": {"entropy.hit", "entropy.mean"},
    "rails.wr.jsonl": {"reranking.accuracy", "reranking.base_accuracy"},
}


@pytest.mark.parametrize("name", sorted(EXPECTED_CI))
def test_lmc_stats_confidence_adds_ci_and_nothing_else(name, parquet_copies):
    path = str(LOGS / name)
    plain = json.loads(run_lmc("stats", path).stdout)
    assert "ci" not in plain
    with_ci = json.loads(run_lmc("stats", "--confidence", "0.9", "--resamples", "500", path).stdout)
    ci = with_ci.pop("ci")
    assert with_ci == plain
    assert set(ci) == EXPECTED_CI[name]
    for key, (low, high) in ci.items():
        group, field = key.split(".")
        assert low <= plain[group][field] <= high, key
        assert low <= high
    # the same intervals from the Parquet copy (same groups, same seed)
    parquet = json.loads(run_lmc("stats", "--confidence", "0.9", "--resamples", "500",
                                 str(parquet_copies[name])).stdout)["ci"]
    for key in ci:
        assert parquet[key] == pytest.approx(ci[key], rel=1e-9)


def test_lmc_stats_confidence_seed_and_csv():
    path = str(LOGS / "rails.wc.jsonl")
    first = run_lmc("stats", "--confidence", "0.95", "--seed", "3", path).stdout
    assert run_lmc("stats", "--confidence", "0.95", "--seed", "3", path).stdout == first
    assert run_lmc("stats", "--confidence", "0.95", "--seed", "4", path).stdout != first
    csv_text = run_lmc("stats", "--confidence", "0.95", "-o", "csv", path).stdout.decode()
    header = csv_text.splitlines()[0].split(",")
    assert header.index("ci.prediction.hit1.high") == header.index("ci.prediction.hit1.low") + 1


@pytest.mark.parametrize("name", ["rails.wc.jsonl", "rails.we.jsonl"])
def test_lmc_stats_text_shows_each_interval_and_unit_beside_its_figure(name):
    """QA: -o text listed the ci and units groups after the figures, as lines of their own
    (``ci.entropy.mean  [4.587199325923991, 4.671933970479233]``)."""
    args = ("stats", "--confidence", "0.95", "--derived", str(LOGS / name))
    row = json.loads(run_lmc(*args).stdout)
    lines = run_lmc(*args, "-o", "text").stdout.decode().splitlines()
    width = max(len(line.split()[0]) for line in lines)
    for key, (low, high) in row["ci"].items():
        group, figure = key.split(".", 1)
        unit = row["units"].get(key) or output.stat_unit(key)
        expected = f"{key:<{width}}  {row[group][figure]:.6g} [{low:.6g}, {high:.6g}]  {unit}"
        assert expected in lines, (expected, lines)
    assert not [line for line in lines if line.startswith(("ci.", "units."))]
    assert sum(line.startswith("entropy.") for line in lines) == (5 if "we" in name else 0)


def test_lmc_stats_confidence_rejects_a_bad_level():
    result = run_lmc("stats", "--confidence", "1.5", str(LOGS / "rails.wc.jsonl"), check=False)
    assert result.returncode == 2
    assert b"--confidence" in result.stderr and b"Traceback" not in result.stderr


def test_few_groups_are_warned_about():
    few = run_lmc("stats", "--confidence", "0.9", str(LOGS / "kjv.ce.jsonl"))     # 4 messages
    assert few.stderr.decode() == (f"WARNING\t{LOGS / 'kjv.ce.jsonl'}: only 4 users (or "
                                   "messages) to resample: the bootstrap intervals are rough\n")
    assert run_lmc("stats", "--confidence", "0.9", str(LOGS / "kjv.wc.jsonl")).stderr == b""   # 30


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_one_group_has_no_interval_and_says_so(tmp_path, method):
    """QA: one group gave the interval [mean, mean] (every resample is that group), which
    read as certain: it is NaN, and the warning says why."""
    one = tmp_path / "one.jsonl"
    with open(LOGS / "kjv.ce.jsonl") as f:
        rows = [line for line in f if json.loads(line)["message"] == 0]
    one.write_text("".join(rows))
    result = run_lmc("stats", "--confidence", "0.95", "--ci-method", method, str(one))
    stats = json.loads(result.stdout)
    assert math.isfinite(stats["entropy"]["mean"])
    assert set(stats["ci"]) == {"entropy.hit", "entropy.mean"}
    assert all(math.isnan(x) for ci in stats["ci"].values() for x in ci)
    assert result.stderr.decode() == (f"WARNING\t{one}: only 1 user (or message) to resample: "
                                      "the bootstrap intervals are NaN (every resample's figure "
                                      "would be its own)\n")


def we_rows(users: int, scored: set[int], logp=lambda u, t: -1.0 - (u * 7 + t) % 5) -> str:
    """A we log of ``users`` users, 20 tokens each, only the users in ``scored`` scored."""
    return "".join(json.dumps({"character": 0, "message": t // 5, "target": "w", "token": t % 5,
                               "user": f"u{u:02d}", "logp": logp(u, t) if u in scored else None}) + "\n"
                   for u in range(users) for t in range(20))


def test_few_groups_with_data_for_a_figure_are_warned_about(tmp_path):
    # 30 users, but only one with scored tokens: entropy.mean's interval rests on one group
    # (QA: width 0, no warning), entropy.hit's on all 30
    log = tmp_path / "one-scored.jsonl"
    log.write_text(we_rows(30, {0}))
    result = run_lmc("stats", "--confidence", "0.95", str(log))
    stats = json.loads(result.stdout)
    assert all(math.isnan(x) for x in stats["ci"]["entropy.mean"])    # it was [mean, mean]
    assert stats["ci"]["entropy.hit"][0] < stats["ci"]["entropy.hit"][1]
    assert result.stderr.decode() == (f"WARNING\t{log}: only 1 of 30 users (or messages) have "
                                      "data for entropy.mean: its bootstrap interval is NaN "
                                      "(every resample's figure would be that one's)\n")
    log.write_text(we_rows(30, set(range(12))))
    result = run_lmc("stats", "--confidence", "0.95", "--derived", str(log))
    assert result.stderr.decode() == (
        f"WARNING\t{log}: only 12 of 30 users (or messages) have data for entropy.mean: its "
        "bootstrap interval is rough\n")
    log.write_text(we_rows(30, set(range(30))))
    assert run_lmc("stats", "--confidence", "0.95", str(log)).stderr == b""
    # few users in all, fewer with scores: one line for each (it said "only 5 of 5 users")
    log.write_text(we_rows(5, {0, 1}))
    assert run_lmc("stats", "--confidence", "0.95", str(log)).stderr.decode() == (
        f"WARNING\t{log}: only 5 users (or messages) to resample: the bootstrap intervals are rough\n"
        f"WARNING\t{log}: only 2 of 5 users (or messages) have data for entropy.mean: its "
        "bootstrap interval is rough\n")
    # of several logs, each one's (QA: three warnings, no log named)
    other = tmp_path / "other.jsonl"
    other.write_text(we_rows(30, {0}))
    assert run_lmc("stats", "--confidence", "0.95", str(log), str(other)).stderr.decode() == (
        f"WARNING\t{log}: only 5 users (or messages) to resample: the bootstrap intervals are rough\n"
        f"WARNING\t{log}: only 2 of 5 users (or messages) have data for entropy.mean: its "
        "bootstrap interval is rough\n"
        f"WARNING\t{other}: only 1 of 30 users (or messages) have data for entropy.mean: its "
        "bootstrap interval is NaN (every resample's figure would be that one's)\n")


def test_data_held_by_a_few_large_users_is_warned_about(tmp_path):
    """QA: one user of 30 holding 90% of the tokens, or 50 users of sizes lognormal with
    sigma 2 (a 95% interval covered 64% of the time), and no warning: 30 users counted as
    enough.  Kish's effective sample size, (sum n)^2 / sum n^2, counts them as about 1."""
    assert bootstrap.effective_groups(np.array([5.0, 5.0, 5.0])) == 3
    assert bootstrap.effective_groups(np.array([9.0, 1.0, 0.0])) == pytest.approx(100 / 82)
    assert bootstrap.effective_groups(np.zeros(3)) == 0
    log = tmp_path / "dominant.jsonl"
    sizes = [261] + [1] * 29         # 90% of the tokens in the first user
    log.write_text("".join(json.dumps({"character": 0, "message": t // 5, "target": "w", "token": t % 5,
                                       "user": f"u{u:02d}", "logp": -1.0 - (u * 7 + t) % 5}) + "\n"
                           for u, n in enumerate(sizes) for t in range(n)))
    result = run_lmc("stats", "--confidence", "0.95", str(log))
    assert result.stderr.decode() == (
        f"WARNING\t{log}: a few of the 30 users (or messages) hold most of the data for "
        "entropy.hit, entropy.mean, as much as 1.2 of equal size would (Kish's effective sample "
        "size): their bootstrap intervals are rough\n")
    stats = json.loads(result.stdout)
    assert stats["ci"]["entropy.mean"][0] < stats["entropy"]["mean"] < stats["ci"]["entropy.mean"][1]
    log.write_text(we_rows(30, set(range(30))))      # 30 users of 20 tokens: as many as 30
    assert run_lmc("stats", "--confidence", "0.95", str(log)).stderr == b""


def test_an_infinite_score_gives_an_interval_reaching_infinity(tmp_path):
    # QA: 0 x inf in the resampling made every resample NaN: "ci" [NaN, NaN] beside a mean of
    # Infinity; the resamples that do not draw the group are finite
    log = tmp_path / "inf.jsonl"
    log.write_text(we_rows(40, set(range(40)), logp=lambda u, t: -math.inf if (u, t) == (3, 0) else -1.0 - u / 40))
    result = run_lmc("stats", "--confidence", "0.95", str(log), check=False)
    stats = json.loads(result.stdout)
    assert stats["entropy"]["mean"] == math.inf
    low, high = stats["ci"]["entropy.mean"]
    assert 1.0 < low < 2.0 and high == math.inf
    groups = bootstrap.summarise(str(log)).table
    totals = bootstrap.resampled_totals(groups.sums, bootstrap.Settings(resamples=300, seed=5))
    column = bootstrap.COLUMN["entropy_sum"]
    finite = groups.sums.copy()
    finite[3, column] = 0.0
    expected = bootstrap.resampled_totals(finite, bootstrap.Settings(resamples=300, seed=5))
    infinite = np.isinf(totals[:, column])
    assert 0 < infinite.sum() < 300 and not np.isnan(totals).any()
    assert np.array_equal(totals[~infinite], expected[~infinite])


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_a_nan_score_gives_a_nan_interval(tmp_path, method):
    """QA: the resamples that drew the NaN user were left out as 'without data', so the
    figure NaN had the finite interval of the resamples that missed that user (biased,
    looking valid); lmc compare showed a null value beside a finite value_ci.  As
    docs/uncertainty.md says: the figure and its interval are NaN, with a warning."""
    nan = tmp_path / "nan.jsonl"
    nan.write_text(we_rows(30, set(range(30)), logp=lambda u, t: math.nan if (u, t) == (3, 0) else -1.0 - u / 10))
    ok = tmp_path / "ok.jsonl"
    ok.write_text(we_rows(30, set(range(30)), logp=lambda u, t: -1.0 - u / 10))
    result = run_lmc("stats", "--confidence", "0.95", "--ci-method", method, str(nan), check=False)
    stats = json.loads(result.stdout)
    assert math.isnan(stats["entropy"]["mean"])
    assert all(math.isnan(x) for x in stats["ci"]["entropy.mean"])
    assert stats["ci"]["entropy.hit"] == [1.0, 1.0]
    assert "entropy.mean not finite" in result.stderr.decode()
    compared = json.loads(run_lmc("compare", "-o", "json", "--ci-method", method, str(ok),
                                  str(nan)).stdout)["metrics"]["entropy.mean"]
    assert (compared["value"], compared["value_ci"], compared["ci"]) == (None, [None, None], None)
    groups = [bootstrap.summarise(str(p)).table for p in (nan, ok)]
    settings = bootstrap.Settings(resamples=200, seed=1, method=method)
    metric = [m for m in bootstrap.METRICS if m[0] == "entropy.mean"]
    for log, baseline in (groups, groups[::-1]):
        delta = bootstrap.paired(log, baseline, metric, settings)["entropy.mean"]
        assert math.isnan(delta.delta) and all(math.isnan(x) for x in delta.ci)


def test_too_many_resamples_are_a_usage_error():
    # QA: --resamples 100000000 asked numpy for 11 GiB: a MemoryError traceback
    result = run_lmc("stats", "--confidence", "0.95", "--resamples", "100000000",
                     str(LOGS / "kjv.wc.jsonl"), check=False)
    assert result.returncode == 2 and b"Traceback" not in result.stderr
    assert b"100000000 is not in the range 2<=x<=1000000" in result.stderr
    with pytest.raises(ValueError, match="resamples must be from 2 to 1,000,000"):
        bootstrap.intervals(bootstrap.summarise(str(LOGS / "kjv.wc.jsonl")).table, bootstrap.METRICS[:1],
                            bootstrap.Settings(resamples=2_000_000))


def test_resamples_too_few_for_the_level_are_warned_about_and_one_is_refused():
    log = str(LOGS / "kjv.wc.jsonl")      # 30 users: no warning of its own
    thin = run_lmc("stats", "--confidence", "0.95", "--resamples", "100", log)
    assert thin.stderr.decode() == ("WARNING\t100 resamples leave 2.5 beyond each endpoint of a "
                                    "0.95 interval: its endpoints are rough (--resamples 400 or "
                                    "more)\n")
    assert run_lmc("stats", "--confidence", "0.95", "--resamples", "400", log).stderr == b""
    assert b"--resamples 2000 or more" in run_lmc("stats", "--confidence", "0.99", log).stderr
    assert b"1999 resamples leave 9.99 beyond" in run_lmc("stats", "--confidence", "0.99", "--resamples",
                                                         "1999", log).stderr     # not "10"
    # QA: it asked for '--resamples 20000000546 or more' (refused) of 'a 1 interval'
    assert run_lmc("stats", "--confidence", "0.999999999", log).stderr.decode() == (
        "WARNING\t1000 resamples leave 5e-07 beyond each endpoint of a 0.999999999 interval: its "
        "endpoints are rough (that takes about 20,000,000,000 resamples, more than the most, "
        "1,000,000: use a lower --confidence)\n")
    one = run_lmc("stats", "--confidence", "0.95", "--resamples", "1", log, check=False)
    assert one.returncode == 2 and one.stdout == b""
    assert "Invalid value for '--resamples': 1 is not in the range 2<=x<=1000000." in one.stderr.decode()


@pytest.mark.parametrize("seed", [1, 3])
def test_an_interval_of_resamples_all_alike_holds_its_estimate(tmp_path, seed):
    """Users all alike: every resample's figure is the log's, but its sums add in another
    order than the estimate's, and the interval missed the estimate by the last digit (one
    user, seeds 1 and 3: 5.974449936294615 against [5.974449936294616, 5.974449936294616];
    one user has no interval now)."""
    import random

    rng = random.Random(seed)
    scores = [-rng.uniform(0.1, 12.0) for _ in range(300)]
    log = tmp_path / "alike.jsonl"
    log.write_text("".join(
        json.dumps({"user": f"u{u}", "message": m, "token": t, "character": 2 * t, "target": "w",
                    "logp": scores[m * 10 + t]}, sort_keys=True) + "\n"
        for u in range(3) for m in range(30) for t in range(10)))
    lmc = [sys.executable, "-m", "lmchallenge.cli"]
    stats = json.loads(subprocess.run([*lmc, "stats", "--derived", "--confidence", "0.95",
                                       str(log)], capture_output=True, check=True).stdout)
    compared = json.loads(subprocess.run([*lmc, "compare", "-o", "json", str(log), str(log)],
                                         capture_output=True, check=True).stdout.splitlines()[-1])
    assert len(stats["ci"]) == 4
    for key, (low, high) in stats["ci"].items():
        assert low <= bootstrap.lookup(stats, key) <= high, key
    for key, row in compared["metrics"].items():
        for value, bounds in ((row["value"], row["value_ci"]), (row["baseline"], row["baseline_ci"])):
            assert bounds[0] <= value <= bounds[1], key
    assert bootstrap.held([1.0 + 1e-15, 2.0], 1.0) == [1.0, 2.0]
    assert bootstrap.held([1.1, 2.0], 1.0) == [1.1, 2.0]     # more than rounding: left as is
