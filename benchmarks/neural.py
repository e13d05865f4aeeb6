"""Speed of the neural adapter (words per second) against the built-in n-gram, same run.

    scripts/fetch-smollm2.sh            # models/SmolLM2-135M-Instruct.Q4_1.gguf
    python benchmarks/neural.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
        [--lines 200] [--wc-lines 4] [--device cpu|cuda] [--dtype auto] [--batch-size 1]
        [--chunk 32] [--search-width 16] [--threads N] [--random-weights] [--count-ops LINES]
        [--profile LINES] [--stub-passes LINES] [--no-ngram] [--wheels DIR]

Runs ``we`` on the first ``--lines`` lines of data/kjv/test.sample.txt and ``wc`` (next-word
predictions only, unless ``--wc-prefixes``: then every prefix of every word is a search too)
on the first ``--wc-lines``, in process
(``lmchallenge.games.we``/``wc`` with :class:`lmchallenge.model.neural.adapter.CausalLM`), then the
built-in n-gram model (``lmc-ngram train`` on data/kjv/train.txt.gz, trained here unless
``--ngram FILE``) on the same lines, and prints words/s for each and the ratio.  For the
neural model it also prints the host side's time per word: the run's wall time outside
the forward passes and the reductions of their log-probabilities (what a GPU does not
speed up: tokenizing, the games, the scores' bookkeeping).  ``--count-ops LINES``: then the
torch ops a forward pass of ``we`` dispatches outside the model, and the copies among them
(each a kernel on a GPU), counted on LINES lines with a fresh model.  ``--profile LINES``:
then ``we`` on LINES lines with a fresh model under :mod:`cProfile` (the Python functions
by their own time), and again with another under ``torch.profiler`` (the torch ops by their
own CPU time and, on CUDA, by their own device time): where a GPU run's host time goes.
``--stub-passes LINES``: instead of all that, the adapter's host side alone (its forward
passes replaced by a stub: CPU time a word on ``we``, calls of ``64 * --batch-size`` queries
as a shared server makes them), on any machine.  ``--no-ngram``: no n-gram runs.
``--wheels DIR``: as for ``benchmarks/scaling.py`` (the device machine).

``--random-weights``: the same architecture and tokenizer as ``--model`` (config and tokenizer
read from the directory or GGUF file, or from the few-MB directory ``lmc-neural skeleton
MODEL DIR`` writes), weights drawn at random: speed does not depend on the weights, so a
machine the model file cannot travel to can still measure it.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "data" / "kjv" / "test.sample.txt"
DEFAULT_MODEL = REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def build_neural(args):
    from lmchallenge.model.neural.adapter import CausalLM
    options = dict(batch_size=args.batch_size, chunk=args.chunk, top=20,
                   max_expansions=args.max_expansions)
    if args.search_width is not None:  # None: the adapter's default (and older adapters')
        options["search_width"] = args.search_width
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    return CausalLM(str(args.model), device=args.device, dtype=args.dtype,
                    random_weights=args.random_weights, **options)


def clock_passes(engine) -> list[float]:
    """Add up the wall time spent in ``engine``'s forward passes and what is done with their
    log-probabilities before they are kept (``_compute``, ``_step``; on a GPU, device time
    and copies): the rest of a run is the host side, which a GPU does not speed up."""
    spent, depth = [0.0], [0]

    def clocked(method):
        def run(*args, **kwargs):
            depth[0] += 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    spent[0] += time.perf_counter() - start
        return run
    engine._compute = clocked(engine._compute)
    engine._step = clocked(engine._step)
    return spent


def count_ops(model, game, lines) -> tuple[int, int, int]:
    """Run ``game`` over ``lines`` counting the torch ops ``model`` dispatches outside the
    forward passes and transformers' cache objects, and the copies among them (clone, cat,
    copy_): on a GPU each op costs the host some microseconds and each copy is a kernel.
    Returns ``(forward passes, ops, copies)``."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers import DynamicCache

    class Counter(TorchDispatchMode):
        ops, copies, on = 0, 0, True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if self.on:
                self.ops += 1
                self.copies += func.__name__.split(".")[0] in ("clone", "cat", "copy_")
            return func(*args, **(kwargs or {}))

    counter = Counter()

    def uncounted(function):
        def run(*args, **kwargs):
            counter.on = False
            try:
                return function(*args, **kwargs)
            finally:
                counter.on = True
        return run

    engine = model.engine
    engine._forward = uncounted(engine._forward)
    init = DynamicCache.__init__
    DynamicCache.__init__ = uncounted(init)
    try:
        passes = engine.forward_passes
        with counter:
            sum(1 for _ in game(model, lines))
    finally:
        DynamicCache.__init__ = init
    return engine.forward_passes - passes, counter.ops, counter.copies


def profiled(args, game, lines, warm_line: str) -> None:
    """Print where ``game`` over ``lines`` spends its time: Python functions (cProfile) with
    one fresh model, then torch ops (``torch.profiler``; on CUDA with their device time)
    with another (each used first on ``warm_line``, not one of ``lines``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    model = warmed(args, warm_line)
    profiler = cProfile.Profile()
    profiler.enable()
    count, elapsed = timed(game, model, lines)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
    print(f"profile, {len(lines)} lines, {count} words in {elapsed:.1f} s under cProfile "
          f"({model.engine.forward_passes} forward passes):\n{out.getvalue()}", flush=True)
    cuda = args.device.startswith("cuda")
    model = warmed(args, warm_line)
    with profile(activities=[ProfilerActivity.CPU]
                 + ([ProfilerActivity.CUDA] if cuda else [])) as torch_profile:
        count, elapsed = timed(game, model, lines)
        if cuda:
            torch.cuda.synchronize()
    averages = torch_profile.key_averages()
    print(f"torch.profiler, {count} words in {elapsed:.1f} s ({model.engine.forward_passes} "
          f"forward passes), by own CPU time:\n"
          f"{averages.table(sort_by='self_cpu_time_total', row_limit=25)}", flush=True)
    if cuda:
        print("by own device time:\n"
              f"{averages.table(sort_by='self_cuda_time_total', row_limit=15)}", flush=True)


def stubbed_host(args, lines: list[str], warm_line: str,
                 repeats: int = 5) -> tuple[int, int, list[float]]:
    """The adapter's host side alone: a fresh model's ``predict_batch`` on the ``we`` queries
    of ``lines`` (in calls of its ``predict_batch_size``, as a shared server makes them) with
    its forward passes replaced by a stub that returns :class:`Sums` of the right shapes at
    once; the passes' kept results dropped before each of ``repeats`` runs (the tokenizer's
    cache stays warm, as in a long run; the model used first on ``warm_line``, as
    :func:`warmed` says).  What a GPU does not speed up, measured on any machine.  Returns
    ``(words, queries a call, CPU seconds a word of each run)``."""
    import numpy as np
    from lmchallenge.model.neural.engine import Sums
    from lmchallenge.tokenize import word_tokenizer

    model = warmed(args, warm_line)
    engine = model.engine
    last = np.zeros(len(model.scorer.vocab.pieces), np.float32)

    def stub(pairs, keep_state=False, endings=None):
        computed = {}
        for past, content in pairs:
            sums = Sums(np.full(len(content) - 1, -1.0, np.float32), last,
                        {name: np.full(len(content), -0.5) for name in endings or {}})
            computed[past, content] = sums
            engine._sums.put((past, content), sums)
            if len(content) == engine.chunk or keep_state:
                engine._states.put(past + content, True)
        engine.forward_passes += -(-len(pairs) // engine.batch)
        return computed

    engine._compute = stub
    queries = [(line[:match.start()], [match.group()]) for line in lines
               for match in word_tokenizer().finditer(line)]
    size = model.predict_batch_size
    times = []
    for _ in range(repeats + 1):  # the first warms the tokenizer's cache: not counted
        for kept in (engine._sums, engine._states, engine._joined):
            kept.items.clear()
        engine._sums.extending.clear()
        start = time.process_time()
        for i in range(0, len(queries), size):
            model.predict_batch(queries[i:i + size])
        times.append((time.process_time() - start) / len(queries))
    return len(queries), size, times[1:]


def warmed(args, line: str):
    """A fresh neural model, used once on ``line`` (its first use computes the
    vocabulary's boundary sets: not what is measured)."""
    model = build_neural(args)
    model.predict(line[:30], None)
    return model


def timed(game, model, lines) -> tuple[int, float]:
    start = time.perf_counter()
    count = sum(1 for _ in game(model, lines))
    return count, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--random-weights", action="store_true")
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--wc-lines", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--max-expansions", type=int, default=64)
    parser.add_argument("--search-width", type=int, default=None,
                        help="paths per pass of the wc search [default: the adapter's]")
    parser.add_argument("--ngram", default=None, help="a trained lmc-ngram model file")
    parser.add_argument("--wc-prefixes", action="store_true",
                        help="wc with every prefix of every word (default: next word only)")
    parser.add_argument("--count-ops", type=int, default=0, metavar="LINES",
                        help="then count the torch ops (and copies) outside the model per "
                             "forward pass, a fresh model's we on LINES lines")
    parser.add_argument("--profile", type=int, default=0, metavar="LINES",
                        help="then profile we on LINES lines (cProfile, torch.profiler)")
    parser.add_argument("--stub-passes", type=int, default=0, metavar="LINES",
                        help="only the adapter's host side: we on LINES lines, its forward "
                             "passes stubbed (CPU us a word, min and median of 5 runs)")
    parser.add_argument("--no-ngram", action="store_true", help="no n-gram runs")
    parser.add_argument("--wheels", type=Path, default=None, metavar="DIR")
    args = parser.parse_args()
    if args.wheels is not None:
        from scaling import reexec_with_wheels   # (beside this script: on sys.path)
        reexec_with_wheels(args.wheels)

    from lmchallenge import games
    from lmchallenge.model.ngram import NgramModel
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    we_lines, wc_lines = lines[:args.lines], lines[:args.wc_lines]

    def wc_game(model, data):
        return games.wc(model, data, next_word_only=not args.wc_prefixes)

    if args.stub_passes:
        count, size, times = stubbed_host(args, lines[:args.stub_passes], lines[-1])
        print(f"neural we, passes stubbed: {count} words ({args.stub_passes} lines, calls of "
              f"{size} queries): host side {min(times) * 1e6:.1f} us/word CPU "
              f"(min of {len(times)}; median {statistics.median(times) * 1e6:.1f})", flush=True)
        return
    start = time.perf_counter()
    neural = warmed(args, lines[-1])
    print(f"neural: {neural.name} loaded and warmed up in {time.perf_counter() - start:.1f} s "
          f"(device {args.device}, chunk {args.chunk}, batch {args.batch_size})", flush=True)
    in_passes = clock_passes(neural.engine)
    results = {}
    runs = tuple(run for run in (("we", games.we, we_lines), ("wc", wc_game, wc_lines))
                 if run[2])
    for name, game, data in runs:
        before = in_passes[0]
        count, elapsed = timed(game, neural, data)
        results[("neural", name)] = count / elapsed
        host = (elapsed - (in_passes[0] - before)) / count * 1e6
        print(f"neural {name}: {count} words in {elapsed:.1f} s: {count / elapsed:.3g} words/s "
              f"({len(data)} lines, {neural.engine.forward_passes} forward passes so far); "
              f"host side {host:.0f} us/word outside the passes", flush=True)

    if args.count_ops:
        passes, ops, copies = count_ops(build_neural(args), games.we, lines[:args.count_ops])
        print(f"neural we, {args.count_ops} lines: {passes} forward passes; outside them "
              f"{ops / passes:.0f} torch ops a pass, {copies / passes:.1f} of them copies",
              flush=True)

    if args.profile:
        profiled(args, games.we, lines[:args.profile], lines[-1])
    if args.no_ngram:
        return
    with tempfile.TemporaryDirectory() as tmp:
        ngram_file = args.ngram
        if ngram_file is None:
            ngram_file = str(Path(tmp) / "kjv.lm")
            subprocess.run([str(Path(sys.executable).parent / "lmc-ngram"), "train",
                            str(REPO / "data" / "kjv" / "train.txt.gz"), "-o", ngram_file],
                           check=True)
        ngram = NgramModel(ngram_file, top=20)
        for name, game, data in runs:
            count, elapsed = timed(game, ngram, data)
            results[("ngram", name)] = count / elapsed
            print(f"ngram {name}: {count} words in {elapsed:.2f} s: {count / elapsed:.0f} words/s",
                  flush=True)
    for name, _, _ in runs:
        ratio = results[("neural", name)] / results[("ngram", name)]
        print(f"{name}: neural {results[('neural', name)]:.3g} words/s, n-gram "
              f"{results[('ngram', name)]:.0f} words/s: ratio {ratio:.3g}")


if __name__ == "__main__":
    main()
