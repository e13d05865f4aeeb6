"""Partitions sized for the cluster and the game (lmc_dist.sizing): cost in model queries,
about 6 partitions per worker, the chosen size recorded and reused by --resume."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, DATA, toy_model_command
from lmc_dist.partition import read_partition, scan
from lmc_dist.sizing import ForCluster, PartitionSize, query_cost
from lmchallenge.games.spec import GameSpec
from lmchallenge.games.runner import run_game

COMMITS = DATA / "commits" / "rails.test.sample.jsonl"


class CountingModel:
    """An in-process model that answers nothing and counts the queries it is asked."""

    def __init__(self) -> None:
        self.queries = 0

    def predict(self, context, candidates):
        self.queries += 1
        return []


def real_queries(game: str, texts: list[str], **options) -> int:
    from lmchallenge.corpus import Message
    model = CountingModel()
    for _ in run_game(GameSpec(game, options).build(), model,
                      [Message(user=None, text=t, line=i + 1) for i, t in enumerate(texts)]):
        pass
    return model.queries


@pytest.mark.parametrize("game, options, tolerance", [
    ("wc", {}, 0.001), ("wc", {"next_word_only": True}, 0.03), ("we", {}, 0.03), ("ce", {}, 0.0)])
def test_query_estimate_is_what_the_game_asks(game, options, tolerance):
    texts = [json.loads(line)["text"] for line in COMMITS.read_text().splitlines()[:1000]]
    cost = query_cost(GameSpec(game, options))
    estimated, real = sum(map(cost, texts)), real_queries(game, texts, **options)
    assert abs(estimated - real) <= tolerance * real, (estimated, real)


def test_wc_costs_about_four_times_we():
    texts = [json.loads(line)["text"] for line in COMMITS.read_text().splitlines()]
    wc, we = query_cost(GameSpec("wc")), query_cost(GameSpec("we"))
    assert 3.5 < sum(map(wc, texts)) / sum(map(we, texts)) < 5.0


@pytest.mark.parametrize("workers", [1, 2, 4, 8])
def test_partitions_per_worker(tmp_path: Path, workers: int) -> None:
    """Full-size partitions of a quarter of a worker's share, then a taper by the worker
    count: 4-8 partitions per worker, none above the limit by more than one message."""
    cost = query_cost(GameSpec("wc"))
    result = scan(str(COMMITS), "auto", ForCluster(workers, min_queries=100), False,
                  str(tmp_path), cost=cost)
    size, parts = result.size, result.partitions
    total = sum(p.queries for p in parts)
    assert size.unit == "queries" and size.workers == workers
    assert size.taper_divisor == workers
    assert abs(size.estimated_queries - total) < 0.05 * total   # sampled: the whole file
    assert size.limit == pytest.approx(total / (4 * workers), rel=0.05)
    assert 4 * workers <= len(parts) <= 8 * workers, len(parts)
    longest = max(cost(m.text) for p in parts for m in read_partition(result.path, p, "json"))
    assert all(p.queries < size.limit + longest for p in parts)
    assert parts[-1].queries < size.limit / 2           # the last ones are small


def test_small_corpus_and_cheap_game_get_fewer_partitions(tmp_path: Path) -> None:
    """On 3,118 commit messages wc asks ~270k queries and we ~62k: for 8 workers, wc's
    partitions are cut at a quarter of a worker's share (8,400), we's at the floor of 5,000
    (a quarter of its share would be 1,900 queries: fixed costs would weigh)."""
    counts = {}
    for game in ("wc", "we"):
        result = scan(str(COMMITS), "auto", ForCluster(8), False, str(tmp_path),
                      cost=query_cost(GameSpec(game)))
        counts[game] = len(result.partitions)
        if game == "we":
            assert result.size.limit == 5_000
        else:
            assert result.size.limit > 5_000
    assert counts["we"] < 32 <= counts["wc"], counts


def test_explicit_characters_cut_as_before(tmp_path: Path) -> None:
    chars = scan(str(COMMITS), "auto", 20000, False, str(tmp_path))
    same = scan(str(COMMITS), "auto", PartitionSize("characters", 20000), False, str(tmp_path),
                cost=query_cost(GameSpec("we")))
    assert [(p.start, p.end) for p in chars.partitions] == [(p.start, p.end) for p in same.partitions]
    assert len(chars.partitions) == 22 and same.partitions[0].queries > 0


def test_queries_need_an_estimate(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="query estimate"):
        scan(str(COMMITS), "auto", ForCluster(2), False, str(tmp_path))


def lmc_dist(args: list[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([str(BIN / "lmc-dist"), *args], capture_output=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(result.stderr.decode())
    return result


@pytest.mark.slow
def test_resume_on_another_cluster_uses_the_recorded_cut(tmp_path: Path) -> None:
    """A run sized for 1 worker fails in its last partitions; resumed on 3 workers it keeps
    the recorded size and cut (3 workers would cut otherwise) and its log is `lmc run`'s."""
    corpus = tmp_path / "kjv.txt"
    with open(DATA / "kjv" / "test.sample.txt", "rb") as f:
        corpus.write_bytes(b"".join(f.readline() for _ in range(300)))
    flag = tmp_path / "crash"
    flag.write_text("")
    run_dir = tmp_path / "run"
    args = ["run", toy_model_command("--crash-if-exists", str(flag), "--crash-word", "Lebbaeus"),
            "wc", "--input", str(corpus), "--run-dir", str(run_dir), "--part-format", "jsonl",
            "--retries", "1"]   # (the crashed process's earlier partitions made again)
    failed = lmc_dist(args + ["--workers", "1"], check=False)
    assert failed.returncode == 2 and "partitions failed" in failed.stderr.decode()
    first = json.loads((run_dir / "_manifest.json").read_text())
    states = [p["state"] for p in first["partitions"]]
    assert states.count("done") >= 3 and "failed" in states
    assert first["partition_size"]["workers"] == 1 and first["partition_chars"] is None
    cut = [(p["start"], p["end"]) for p in first["partitions"]]
    fresh = scan(str(corpus), "auto", ForCluster(3), False, str(tmp_path),
                 cost=query_cost(GameSpec("wc")))
    assert [(p.start, p.end) for p in fresh.partitions] != cut

    flag.unlink()
    lmc_dist(args + ["--workers", "3", "--resume", "--output", str(tmp_path / "all.jsonl")])
    resumed = json.loads((run_dir / "_manifest.json").read_text())
    assert resumed["partition_size"] == first["partition_size"]
    assert [(p["start"], p["end"]) for p in resumed["partitions"]] == cut
    assert all(p["state"] == "done" for p in resumed["partitions"])
    expected = subprocess.run([str(BIN / "lmc"), "run", toy_model_command(), "wc", str(corpus)],
                              capture_output=True, check=True).stdout
    assert (tmp_path / "all.jsonl").read_bytes() == expected

    other = lmc_dist(args + ["--resume", "--partition-chars", "5000"], check=False)
    assert other.returncode == 2
    assert "cannot resume: --partition-chars differs from the run in this directory " \
        "(partition_chars " in other.stderr.decode()
