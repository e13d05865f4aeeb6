"""`we` with a neural model through `lmc-dist` (workers feeding one GPU) against `lmc run`.

    lmc-neural skeleton models/SmolLM2-135M-Instruct.Q4_1.gguf smol-skeleton   # 3.5 MB
    python benchmarks/neural_dist.py --model smol-skeleton --random-weights --device cuda \\
        [--lines 100000] [--base-lines 2000] [--workers 16] [--dtype auto] [--batch-size 1]
        [--chunk 32] [--wheels DIR]

Corpus: ``--lines`` lines of the shipped KJV text (cycled, as ``benchmarks/scaling.py``
builds it).  Model: ``lmc-neural serve MODEL`` with the options given, one process per
worker (the embedded cluster, ``--workers``).  First ``lmc run`` on the first
``--base-lines`` lines (one model process: the baseline), then ``lmc-dist run`` on all of
them; printed: words, wall, words/s of each and the ratio, and on CUDA the GPU's busy share
during the ``lmc-dist`` run (``nvidia-smi`` utilisation sampled every 200 ms: the share of
time a kernel was running).  Issue 13's target: >= 50,000 words/s on >= 100k lines on the
device machine (one H100, 16 cores).

``--random-weights``: the architecture and tokenizer of ``--model`` (a ``lmc-neural
skeleton`` directory will do) with random weights: the speed of the real model.
``--wheels DIR``: as for ``benchmarks/scaling.py`` (the device machine; carry the skeleton).
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per model")
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--base-lines", type=int, default=2_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--wheels", type=Path, default=None, metavar="DIR")
    args = parser.parse_args()
    if args.wheels is not None:
        reexec_with_wheels(args.wheels)
    bin_dir = Path(os.environ.get("LMC_SCALING_BIN", Path(sys.executable).parent))
    model = shlex.join([str(bin_dir / "lmc-neural"), "serve", args.model, "--device", args.device,
                        "--dtype", args.dtype, "--batch-size", str(args.batch_size), "--chunk",
                        str(args.chunk), "--threads", str(args.threads)]
                       + (["--random-weights"] if args.random_weights else []))
    # the server answers 64 * batch-size queries a call and reads about half the window at once
    window = str(max(256, 128 * args.batch_size))
    work = Path(tempfile.mkdtemp(prefix="lmc-neural-dist-"))
    try:
        corpus, base = work / "corpus.txt", work / "base.txt"
        build_corpus(corpus, args.lines, "kjv")
        build_corpus(base, min(args.base_lines, args.lines), "kjv")
        print(f"machine: {os.cpu_count()} CPUs; model: {model}", flush=True)

        base_s, result = timed([str(bin_dir / "lmc"), "run", "--timeout", "600", "--window",
                                window, model, "we",
                                str(base)], stdout=subprocess.PIPE)
        base_words = result.stdout.count("\n")
        print(f"lmc run, {args.base_lines} lines: {base_words} words in {base_s:.1f} s: "
              f"{base_words / base_s:,.0f} words/s (model load included)", flush=True)

        samples: list[float] = []
        stop = threading.Event()
        sampler = threading.Thread(target=gpu_sampler, args=(stop, samples), daemon=True)
        if args.device.startswith("cuda") and shutil.which("nvidia-smi"):
            sampler.start()
        run_dir = work / "run"
        dist_s, result = timed([str(bin_dir / "lmc-dist"), "run", model, "we", "--input", str(corpus),
                                "--run-dir", str(run_dir), "--workers", str(args.workers),
                                "--timeout", "600", "--window", window, "--no-progress"])
        stop.set()
        manifest = json.loads((run_dir / "_manifest.json").read_text())
        words = sum(p.get("rows") or 0 for p in manifest["partitions"])
        rate = words / dist_s
        print(f"lmc-dist --workers {args.workers}, {args.lines} lines: {words} words in "
              f"{dist_s:.1f} s: {rate:,.0f} words/s ({len(manifest['partitions'])} partitions); "
              f"{rate / (base_words / base_s):.1f}x lmc run", flush=True)
        if samples:
            print(f"GPU busy share during lmc-dist: mean {statistics.mean(samples):.0f}%, "
                  f"median {statistics.median(samples):.0f}% ({len(samples)} samples)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
