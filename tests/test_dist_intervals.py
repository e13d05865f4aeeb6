"""lmc-dist run --confidence: `_stats.json` carries the bootstrap intervals of `lmc stats
--confidence`, from per-group sums made on the workers (real Dask workers on loopback)."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import BIN, DATA, toy_model_command
from test_dist import commits, lmc_dist  # noqa: F401  (a fixture)

INTERVALS = ["--confidence", "0.9", "--resamples", "400"]
SEED = "7"     # lmc stats --seed, lmc-dist run --ci-seed (wr has a --seed of its own)


def lmc_stats(*args: str) -> dict:
    out = subprocess.run([str(BIN / "lmc"), "stats", *args], capture_output=True, check=True).stdout
    row = json.loads(out)
    row.pop("log")
    return row


@pytest.mark.parametrize("game", [["wc"], pytest.param(["wr", str(DATA / "vocab" / "american-english.txt")],
                                                      marks=pytest.mark.slow)], ids=["wc", "wr"])
def test_run_intervals_equal_lmc_stats_confidence(tmp_path, commits, game):  # noqa: F811
    run_dir = tmp_path / "run"
    whole = tmp_path / "all.jsonl"
    done = lmc_dist(["run", toy_model_command(), *game, "--input", str(commits), "--run-dir", str(run_dir),
                     "--workers", "2", "--partition-chars", "3000", "--output", str(whole), *INTERVALS, "--ci-seed", SEED])
    stats = json.loads((run_dir / "_stats.json").read_text())
    assert json.loads(done.stdout) == stats
    expected = {"wc": {"prediction.hit", "prediction.hit1", "prediction.hit3", "prediction.hit10",
                       "prediction.hit20", "prediction.mrr", "completion.characters", "completion.tokens"},
                "wr": {"reranking.accuracy", "reranking.base_accuracy"}}[game[0]]
    assert set(stats["ci"]) == expected
    # the run dir read part by part: the same per-group sums, the same numbers exactly
    assert lmc_stats(*INTERVALS, "--seed", SEED, str(run_dir)) == stats
    # lmc-dist stats re-reduces the run dir: the same again
    assert json.loads(lmc_dist(["stats", *INTERVALS, "--seed", SEED, str(run_dir)]).stdout) == stats
    assert "ci" not in json.loads(lmc_dist(["stats", str(run_dir)]).stdout)
    thin = lmc_dist(["stats", "--confidence", "0.9", "--resamples", "100", str(run_dir)])
    assert thin.stderr.decode().startswith("WARNING\t100 resamples leave 5 beyond each endpoint")
    # the concatenated log: the same groups; sums of floats (reciprocal ranks) may be added
    # in another grouping of rows, so equal to rounding
    single = lmc_stats(*INTERVALS, "--seed", SEED, str(whole))
    ci = single.pop("ci")
    assert single == {k: v for k, v in stats.items() if k != "ci"}
    for key, interval in stats["ci"].items():
        assert interval == pytest.approx(ci[key], rel=1e-12, abs=0)


@pytest.mark.parametrize("path", ["/dev/null", "empty"])
def test_stats_of_what_is_not_a_run_dir_is_refused(tmp_path, path):
    """A device (click lets it through as "not a file") and an empty directory: an error,
    not the statistics of nothing."""
    if path == "empty":
        path = str(tmp_path)
    run = subprocess.run([str(BIN / "lmc-dist"), "stats", path], capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == ""
    assert (f"'{path}' is not a directory" if path == "/dev/null"
            else f"{path}: not a log: the directory holds no part-NNNNN.parquet, .jsonl or "
                 ".jsonl.gz files\n") in run.stderr
