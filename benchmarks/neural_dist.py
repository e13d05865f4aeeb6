"""`we` with a neural model through `lmc-dist` (workers feeding one GPU) against `lmc run`.

    lmc-neural skeleton models/SmolLM2-135M-Instruct.Q4_1.gguf smol-skeleton   # 3.5 MB
    python benchmarks/neural_dist.py --model smol-skeleton --random-weights --device cuda \\
        [--lines 100000] [--base-lines 2000] [--workers 16] [--dtype auto] [--batch-size 1[,16..]]
        [--chunk 32[,128..]] [--shared [K[,K..]]] [--wheels DIR]

Corpus: ``--lines`` lines of the shipped KJV text (cycled, as ``benchmarks/scaling.py``
builds it).  Model: ``lmc-neural serve MODEL`` with the options given, one process per
worker (the embedded cluster, ``--workers``).  First ``lmc run`` on the first
``--base-lines`` lines (one model process, the first ``--batch-size`` and ``--chunk``: the
baseline), then ``lmc-dist run`` on all of them for each ``--batch-size`` x ``--chunk`` (comma
lists: a sweep in one call); printed: words, wall, words/s of each and the ratio, on CUDA the
GPU's busy share during the ``lmc-dist`` run (``nvidia-smi`` utilisation sampled every 200 ms:
the share of time a kernel was running), and how far the ``lmc-dist`` log's scores of the
baseline's lines are from ``lmc run``'s (equal on a CPU; on a GPU the rows batched together
change the kernels' sums, by about float32's or bfloat16's rounding).  Issue 13's target: >= 50,000 words/s on >= 100k lines on the
device machine (one H100, 16 cores).

``--shared [K[,K..]]``: the ``lmc-dist`` runs use K model processes (default 1; a comma list:
a run for each, 0 meaning a process per worker) for all workers
(``lmc-neural serve --listen SOCKET``, started before and stopped after each run, their load
not timed; the workers' model command ``lmc-neural connect SOCKET...``, worker N's relay
taking server N modulo K): the queries of the workers of a server share its passes, instead of
a process per worker taking turns on the GPU.

``--random-weights``: the architecture and tokenizer of ``--model`` (a ``lmc-neural
skeleton`` directory will do) with random weights: the speed of the real model.
``--wheels DIR``: as for ``benchmarks/scaling.py`` (the device machine; carry the skeleton).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from scaling import build_corpus, reexec_with_wheels


def gpu_sampler(stop: threading.Event, samples: list[float]) -> None:
    """Append the GPU's utilisation (percent) every 200 ms until ``stop`` is set."""
    while not stop.is_set():
        out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            samples.append(float(out.stdout.split()[0]))
        stop.wait(0.2)


def timed(argv: list[str], stdout=subprocess.DEVNULL) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    result = subprocess.run(argv, stdout=stdout, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {shlex.join(argv)}\n{result.stderr[-3000:]}")
    return elapsed, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="model directory, .gguf, or skeleton")
    parser.add_argument("--random-weights", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--batch-size", default="1", help="one, or a comma list")
    parser.add_argument("--chunk", default="32", help="one, or a comma list")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per model")
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--base-lines", type=int, default=2_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--wheels", type=Path, default=None, metavar="DIR")
    parser.add_argument("--shared", nargs="?", const="1", default="0", metavar="K[,K..]",
                        help="lmc-dist's workers share K model processes (lmc-neural connect); "
                             "a comma list: one run each")
    args = parser.parse_args()
    if args.wheels is not None:
        reexec_with_wheels(args.wheels)
    bin_dir = Path(os.environ.get("LMC_SCALING_BIN", Path(sys.executable).parent))
    configs = [(batch, chunk, shared) for batch in _ints(args.batch_size)
               for chunk in _ints(args.chunk) for shared in _ints(args.shared)]
    work = Path(tempfile.mkdtemp(prefix="lmc-neural-dist-"))
    try:
        corpus, base = work / "corpus.txt", work / "base.txt"
        build_corpus(corpus, args.lines, "kjv")
        build_corpus(base, min(args.base_lines, args.lines), "kjv")
        print(f"machine: {os.cpu_count()} CPUs", flush=True)
        model, window = _model(bin_dir, args, *configs[0][:2])
        base_s, result = timed([str(bin_dir / "lmc"), "run", "--timeout", "600", "--window",
                                window, model, "we", str(base)], stdout=subprocess.PIPE)
        base_log = [json.loads(line) for line in result.stdout.splitlines()]
        base_rate = len(base_log) / base_s
        print(f"lmc run, {args.base_lines} lines, {model}: {len(base_log)} words in {base_s:.1f} "
              f"s: {base_rate:,.0f} words/s (model load included)", flush=True)
        for batch, chunk, shared in configs:
            model, window = _model(bin_dir, args, batch, chunk)
            run_dir = work / f"run-{batch}-{chunk}-{shared}"
            if not shared:
                _dist_run(bin_dir, args, model, window, corpus, run_dir, base_log, base_rate)
                continue
            with _shared_servers(bin_dir, model, work, shared) as connect:
                _dist_run(bin_dir, args, connect, window, corpus, run_dir, base_log, base_rate,
                          label=f"{model} --listen ({shared} shared)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def _model(bin_dir: Path, args: argparse.Namespace, batch: int, chunk: int) -> tuple[str, str]:
    """The model command of one configuration and the window that feeds its batches (the
    server answers 64 * batch-size queries a call and reads about half the window at once)."""
    model = shlex.join([str(bin_dir / "lmc-neural"), "serve", args.model, "--device", args.device,
                        "--dtype", args.dtype, "--batch-size", str(batch), "--chunk", str(chunk),
                        "--threads", str(args.threads)]
                       + (["--random-weights"] if args.random_weights else []))
    return model, str(max(256, 128 * batch))


@contextlib.contextmanager
def _shared_servers(bin_dir: Path, model: str, work: Path, count: int):
    """Run ``count`` servers ``model --listen SOCKET`` while the block runs; yield the
    workers' model command."""
    socks = [str(work / f"model-{i}.sock") for i in range(count)]
    servers = [subprocess.Popen(shlex.split(model) + ["--listen", sock], stderr=subprocess.PIPE,
                                text=True) for sock in socks]
    try:
        for server in servers:
            for line in server.stderr:      # until it has loaded the model and listens
                if line.startswith("lmc-neural: serving"):
                    break
            else:
                sys.exit(f"a shared server did not start (exit {server.wait()})")
            threading.Thread(target=server.stderr.read, daemon=True).start()   # drained
        yield shlex.join([str(bin_dir / "lmc-neural"), "connect", *socks])
    finally:
        for server in servers:
            server.terminate()
            server.wait(60)


def _dist_run(bin_dir: Path, args: argparse.Namespace, model: str, window: str, corpus: Path,
              run_dir: Path, base_log: list[dict], base_rate: float,
              label: str | None = None) -> None:
    """One ``lmc-dist run``: its words/s, the GPU's busy share, its scores against lmc run's."""
    samples: list[float] = []
    stop = threading.Event()
    sampler = threading.Thread(target=gpu_sampler, args=(stop, samples), daemon=True)
    if args.device.startswith("cuda") and shutil.which("nvidia-smi"):
        sampler.start()
    dist_s, _ = timed([str(bin_dir / "lmc-dist"), "run", model, "we", "--input", str(corpus),
                       "--run-dir", str(run_dir), "--workers", str(args.workers),
                       "--timeout", "600", "--window", window, "--no-progress"])
    stop.set()
    manifest = json.loads((run_dir / "_manifest.json").read_text())
    words = sum(p.get("rows") or 0 for p in manifest["partitions"])
    rate = words / dist_s
    print(f"lmc-dist --workers {args.workers}, {args.lines} lines, {label or model}: {words} words in "
          f"{dist_s:.1f} s: {rate:,.0f} words/s ({len(manifest['partitions'])} partitions); "
          f"{rate / base_rate:.1f}x lmc run", flush=True)
    if samples:
        print(f"  GPU busy share during lmc-dist: mean {statistics.mean(samples):.0f}%, "
              f"median {statistics.median(samples):.0f}% ({len(samples)} samples)", flush=True)
    print(f"  {_agreement(run_dir, base_log)}", flush=True)
    shutil.rmtree(run_dir, ignore_errors=True)


def _agreement(run_dir: Path, base_log: list[dict]) -> str:
    """How the run dir's first rows compare with ``lmc run``'s log of the same lines."""
    import pandas

    log = pandas.read_parquet(run_dir).head(len(base_log))
    if list(log["target"]) != [datum["target"] for datum in base_log]:
        return "the lmc-dist log's first targets differ from lmc run's: not the same lines"
    diffs = [abs(a - datum["logp"]) if datum.get("logp") is not None else 0.0
             for a, datum in zip(log["logp"].fillna(0.0), base_log)]
    same = sum(d == 0.0 for d in diffs)
    return (f"scores of the first {len(base_log)} words against lmc run's: {same} equal, "
            f"max difference {max(diffs):.2e} nats, mean {statistics.mean(diffs):.2e}")


if __name__ == "__main__":
    main()
