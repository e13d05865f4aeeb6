"""The docker-compose cluster end to end (marked ``docker``: ``pytest -m docker``, CI's docker step).

Builds the image with deploy/build-image.sh (cached steps are reused), brings up the scheduler and 2
workers of docker-compose.yml under a project name of its own, runs the README's main job on them
with ``docker compose run`` (n-gram trained on the Old Testament, ``wc`` on data/kjv/test.sample.txt),
reads the Parquet run dir with pandas here, and compares the log and its statistics with ``lmc run``
+ ``lmc stats`` of this venv on the same input and model; then kills one worker container in the
middle of a second run (small partitions) and checks that the result is still identical. The
cluster is torn down even when a test fails. Nothing is published except the dashboard, on
127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import BIN, REPO, free_port

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

COMPOSE_FILE = REPO / "docker-compose.yml"
IMAGE = os.environ.get("LMC_IMAGE", "lmc-dist:local")
UID = 1000   # the image's user (deploy/Dockerfile), the compose file's default LMC_UID
CORPUS = "data/kjv/test.sample.txt"
PREDICTOR = "lmc-ngram serve runs/kjv.lm"
SCHEDULER = "tcp://scheduler:8786"


def compose_tool() -> list[str]:
    if shutil.which("docker") is None:
        pytest.skip("no docker command")
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("`docker info` failed: no usable docker engine")
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("neither `docker compose` nor `docker-compose` is installed")


def log(message: str) -> None:
    sys.stdout.write(f"[{time.strftime('%H:%M:%S')}] {message}\n")
    sys.stdout.flush()


class Cluster:
    def __init__(self, tool: list[str], project: str, env: dict, runs: Path, dashboard_port: int):
        self.tool, self.project, self.env, self.runs = tool, project, env, runs
        self.dashboard_port = dashboard_port

    def compose_args(self, *args: str) -> list[str]:
        return [*self.tool, "-p", self.project, "-f", str(COMPOSE_FILE), *args]

    def compose(self, *args: str, timeout: float = 600, check: bool = True):
        result = subprocess.run(self.compose_args(*args), cwd=REPO, env=self.env, text=True,
                                capture_output=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{shlex.join(self.compose_args(*args))} exited with "
                                 f"{result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result

    def run_args(self, *args: str) -> list[str]:
        """``docker compose run --rm -T lmc-dist ARGS``: a one-off client container."""
        return self.compose_args("run", "--rm", "-T", "lmc-dist", *args)

    def containers(self, service: str) -> list[str]:
        out = subprocess.run(["docker", "ps", "-q", "--filter",
                              f"label=com.docker.compose.project={self.project}", "--filter",
                              f"label=com.docker.compose.service={service}"],
                             capture_output=True, text=True, check=True).stdout
        return out.split()

    def health(self, container: str) -> str:
        return subprocess.run(["docker", "inspect", "-f", "{{.State.Health.Status}}", container],
                              capture_output=True, text=True).stdout.strip()

    def wait_healthy(self, service: str, count: int, timeout: float = 180) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            containers = self.containers(service)
            states = [self.health(c) for c in containers]
            if len(containers) == count and all(s == "healthy" for s in states):
                return containers
            if time.monotonic() > deadline:
                raise AssertionError(f"{service}: {states} after {timeout} s, wanted {count} healthy")
            time.sleep(2)

    def teardown(self, show_logs: bool) -> None:
        if show_logs:
            logs = self.compose("logs", "--no-color", "--tail", "40", check=False, timeout=120)
            log("cluster logs (tail):\n" + logs.stdout[-6000:])
        self.compose("--profile", "client", "down", "--remove-orphans", "-t", "5", check=False,
                     timeout=300)
        left = subprocess.run(["docker", "ps", "-aq", "--filter",
                               f"label=com.docker.compose.project={self.project}"],
                              capture_output=True, text=True).stdout.split()
        if left:
            subprocess.run(["docker", "rm", "-f", *left], capture_output=True)
        subprocess.run(["docker", "network", "rm", f"{self.project}_default"], capture_output=True)


@pytest.fixture(scope="module")
def tool() -> list[str]:
    return compose_tool()


@pytest.fixture(scope="module")
def image(tool) -> str:
    """deploy/build-image.sh (reuses the base image, the wheels and Docker's layer cache)."""
    if os.environ.get("LMC_DOCKER_NO_BUILD"):
        return IMAGE
    start = time.monotonic()
    result = subprocess.run([str(REPO / "deploy" / "build-image.sh")], cwd=REPO, text=True,
                            capture_output=True, env=dict(os.environ, LMC_IMAGE=IMAGE),
                            timeout=1500)
    log(f"deploy/build-image.sh took {time.monotonic() - start:.0f} s:\n{result.stderr[-3000:]}")
    assert result.returncode == 0, f"deploy/build-image.sh failed:\n{result.stderr[-6000:]}"
    return IMAGE


@pytest.fixture(scope="module")
def cluster(tool, image, tmp_path_factory, request):
    runs = tmp_path_factory.mktemp("docker") / "runs"
    runs.mkdir()
    env = dict(os.environ, LMC_IMAGE=image, LMC_RUNS_DIR=str(runs))
    env.pop("LMC_DATA_DIR", None)   # the compose default: ./data of the repository
    if os.getuid() == 0:
        os.chown(runs, UID, UID)    # the containers' user owns what they write
    else:
        env.update(LMC_UID=str(os.getuid()), LMC_GID=str(os.getgid()))
    port = free_port()
    env["LMC_DASHBOARD_PORT"] = str(port)
    # deploy/ci-docker.sh names the project (and removes what is left of it when it exits)
    project = os.environ.get("LMC_COMPOSE_PROJECT") or f"lmctest{os.getpid()}"
    cluster = Cluster(tool, project, env, runs, port)
    try:
        start = time.monotonic()
        cluster.compose("up", "-d", "--scale", "worker=2", timeout=300)
        cluster.wait_healthy("scheduler", 1)
        cluster.wait_healthy("worker", 2)
        log(f"scheduler and 2 workers healthy after {time.monotonic() - start:.0f} s")
        yield cluster
    finally:
        # the containers' logs when something failed
        cluster.teardown(show_logs=request.session.testsfailed > 0 or sys.exc_info()[0] is not None)


@pytest.fixture(scope="module")
def model(cluster) -> Path:
    """The README's model, trained in a one-off container into the mounted runs/."""
    start = time.monotonic()
    result = subprocess.run(cluster.compose_args(
        "run", "--rm", "-T", "--entrypoint", "lmc-ngram", "lmc-dist",
        "train", "data/kjv/train.txt.gz", "-o", "runs/kjv.lm"),
        cwd=REPO, env=cluster.env, text=True, capture_output=True, timeout=600)
    assert result.returncode == 0, result.stderr
    path = cluster.runs / "kjv.lm"
    assert path.is_file() and path.stat().st_uid == int(cluster.env.get("LMC_UID", UID))
    log(f"lmc-ngram train in a container took {time.monotonic() - start:.0f} s")
    return path


@pytest.fixture(scope="module")
def reference(model, tmp_path_factory) -> tuple[Path, dict]:
    """``lmc run`` + ``lmc stats`` of this venv, single process, same model and corpus."""
    out = tmp_path_factory.mktemp("reference") / "kjv.wc.jsonl.gz"
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    predictor = f"{BIN / 'lmc-ngram'} serve {shlex.quote(str(model))}"
    start = time.monotonic()
    subprocess.run([str(BIN / "lmc"), "run", "--output", str(out), predictor, "wc",
                    str(REPO / CORPUS)], check=True, env=env, timeout=900)
    stats = json.loads(subprocess.run([str(BIN / "lmc"), "stats", str(out)], check=True, env=env,
                                      capture_output=True, text=True).stdout)
    stats.pop("log", None)
    log(f"lmc run on the host took {time.monotonic() - start:.0f} s")
    return out, stats


def run_stats(run_dir: Path) -> dict:
    for name in ("_stats.json", "stats.json"):
        if (run_dir / name).exists():
            return json.loads((run_dir / name).read_text())
    raise AssertionError(f"no _stats.json or stats.json in {run_dir}: {os.listdir(run_dir)}")


def check_same_as_reference(run_dir: Path, printed: dict, reference) -> None:
    import pandas
    from lmchallenge.logs.io import read_log

    ref_log, ref_stats = reference
    frame = pandas.read_parquet(run_dir)
    assert len(frame) == ref_stats["tokens_per_user"] * ref_stats["users"]
    assert {"user", "message", "token", "character", "target", "completions"} <= set(frame.columns)
    assert list(frame["target"]) == [d["target"] for d in read_log(str(ref_log))]
    assert list(read_log(str(run_dir))) == list(read_log(str(ref_log)))
    for stats in (run_stats(run_dir), printed):
        assert json.dumps(stats, sort_keys=True) == json.dumps(ref_stats, sort_keys=True), \
            f"{stats}\n!=\n{ref_stats}"


def test_cluster_serves(cluster):
    for container in cluster.containers("scheduler"):
        ports = subprocess.run(["docker", "port", container], capture_output=True, text=True,
                               check=True).stdout.split()
        bound = [p for p in ports if ":" in p]
        assert bound and all(p.startswith("127.0.0.1:") for p in bound), ports
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.dashboard_port}/health",
                                timeout=10) as response:
        assert response.read() == b"ok"


def test_readme_job_matches_lmc_run(cluster, model, reference):
    start = time.monotonic()
    result = subprocess.run(cluster.run_args(
        "run", PREDICTOR, "wc", "--input", CORPUS, "--run-dir", "runs/kjv-wc",
        "--scheduler", SCHEDULER), cwd=REPO, env=cluster.env, text=True, capture_output=True,
        timeout=900)
    assert result.returncode == 0, result.stderr
    log(f"lmc-dist run on the compose cluster took {time.monotonic() - start:.0f} s: "
        f"{result.stderr.strip().splitlines()[-1]}")
    printed = json.loads(result.stdout.strip().splitlines()[-1])
    check_same_as_reference(cluster.runs / "kjv-wc", printed, reference)


def test_worker_killed_mid_run(cluster, model, reference):
    run_dir = cluster.runs / "kjv-wc-kill"
    workers = cluster.containers("worker")
    assert len(workers) == 2
    start = time.monotonic()
    process = subprocess.Popen(cluster.run_args(
        "run", PREDICTOR, "wc", "--input", CORPUS, "--run-dir", "runs/kjv-wc-kill",
        "--partition-chars", "2000", "--scheduler", SCHEDULER),
        cwd=REPO, env=cluster.env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while True:
            # finished partitions wait in _temporary/ until the run commits (docs/formats.md)
            parts = list(run_dir.glob("_temporary/part-*.parquet")) if run_dir.is_dir() else []
            if len(parts) >= 2 or process.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert process.poll() is None, "the run ended before a worker could be killed:\n" + \
            process.communicate()[1]
        assert len(parts) >= 2, "no partition was written in 300 s"
        subprocess.run(["docker", "kill", workers[-1]], check=True, capture_output=True)
        log(f"killed worker {workers[-1][:12]} after {len(parts)} partitions were written")
        stdout, stderr = process.communicate(timeout=900)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    log(f"lmc-dist run with a worker killed took {time.monotonic() - start:.0f} s: "
        f"{stderr.strip().splitlines()[-1]}")
    assert cluster.containers("worker") == workers[:-1]
    manifest = json.loads(next(p for p in (run_dir / "_manifest.json", run_dir / "manifest.json")
                               if p.exists()).read_text())
    assert len(list(run_dir.glob("part-*.parquet"))) > 2, manifest.get("partitions")
    printed = json.loads(stdout.strip().splitlines()[-1])
    check_same_as_reference(run_dir, printed, reference)
