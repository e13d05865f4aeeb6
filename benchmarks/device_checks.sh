#!/usr/bin/env bash
# The device machine's figures for issues 12 and 13, most needed first, each step under its own
# time limit, so that a session lent the machine (15 minutes of device time in all, its start
# included; at most 10 minutes a command) gets them in two calls of the device tool.
#
# Before (here, in the repository root; nothing downloads there):
#   echo /.whl/ >> .git/info/exclude; echo /smol-skeleton/ >> .git/info/exclude
#   python3 -m pip download --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#       dask distributed emoji jsonschema jsonschema-rs regex fsspec
#   # then delete from .whl what the machine has (click, numpy, pandas, pyarrow, ...: one
#   # version of each must remain)
#   lmc-neural skeleton models/SmolLM2-135M-Instruct.Q4_1.gguf smol-skeleton
# Then the device tool, carrying [".whl", "smol-skeleton"]:
#   call 1, timeout_s 570: bash benchmarks/device_checks.sh 1   (targets: ~8.5 minutes)
#   call 2, timeout_s 300: bash benchmarks/device_checks.sh 2   (1M lines; stage 4: the fit)
# Stages 1 and 2 ran on 2026-11-26 (395 s and 200 s; BENCHMARKS.md); their targets were not
# met, so the next session lent the machine runs stage 3 first (about 8 minutes):
#   call, timeout_s 570: bash benchmarks/device_checks.sh 3
#   (the CPU topology; 16 `lmc run`s at once beside lmc-dist --workers 16: the machine's own
#   ceiling; 10 and 12 workers; GPU passes of 16 and 64 rows; the same with the CUDA MPS daemon)
# then stage 6 (timeout_s 330): the 16 workers feeding one shared model process (lmc-neural
#   serve --listen, the workers' model `lmc-neural connect`), passes of 16 and 64 rows, then
#   two such processes;
# then, with the time left, stage 2 (timeout_s 300): the built-in model in the workers' own
#   processes (--in-process: one process per worker, a fifth less CPU a token on 2 cores):
#   the 100k-line `we` at 16 workers (1.84x the limit over the pipe), then 1M lines of `we`
#   (the n-gram's CPU per query fell by a quarter since: 0a8fe3a; "ngram_model"); stage 5
#   (timeout_s 200): the 1M lines over the pipe again
# Stage 7 ran on 2026-11-27 (one call, 446 s; BENCHMARKS.md): the next session lent the
# machine runs stage 8 first (timeout_s 570: where one GPU model process's time goes, then
# passes of 64 and 256 rows for 8 shared processes under MPS, the faster on 100k lines), then
# stage 9 (timeout_s 270: 1M lines of `we` since the scan reads blocks, issue 12's 60 s; a
# 1M-row json corpus' scan with and without its helper processes).
# Each step's output is also in $OUT/STEP.log. A step that runs past its limit is stopped
# (with its whole process group) and the next one starts; its log says how far it got.
set -u
stage=${1:?usage: device_checks.sh 1|2|3|4|5|6|7|8|9}
out=${OUT:-/tmp/device-checks}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 LMC_WHEELS_SITE=/tmp/lmc-site

step() {    # step NAME LIMIT_SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    echo "== $name (at most ${limit} s): $*"
    local start=$SECONDS
    timeout -k 10 "$limit" "$@" > >(tee "$out/$name.log") 2>&1
    echo "== $name: exit $?, $((SECONDS - start)) s"
}

fastest() {    # fastest LOG PATTERN DEFAULT: the PATTERN group of the neural_dist.py run in
    # LOG with the most words/s (PATTERN matches its line up to the first ":"), or DEFAULT
    python3 - "$@" <<'EOF'
import re, sys
log, pattern, default = sys.argv[1:]
rates = [(float(rate.replace(",", "")), key) for key, rate in re.findall(
    pattern + r": \d+ words in [\d.]+ s: ([\d,]+) words/s", open(log).read())]
print(max(rates)[1] if rates else default)
EOF
}

nproc; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null
case $stage in
1)  # issue 13: >= 50,000 we words/s on >= 100k lines, 16 CPU workers feeding the GPU
    step neural 200 python3 benchmarks/neural_dist.py --wheels .whl --model smol-skeleton \
        --random-weights --device cuda --lines 100000 --base-lines 2000 --workers 16 \
        --batch-size 16 --chunk 32
    # issue 12: wall <= 1.25 x (lmc run's CPU-seconds / 16), we and wc on 100k lines
    step we16 80 python3 benchmarks/scaling.py --wheels .whl --games we --lines 100000 \
        --base-lines 20000 --workers 16 --json "$out/we16.json"
    step wc16 250 python3 benchmarks/scaling.py --wheels .whl --games wc --wc-lines 100000 \
        --base-lines 4000 --workers 16 --json "$out/wc16.json"
    ;;
2)  # issue 12 with the built-in model in the workers' processes (--in-process: one process
    # per worker, a fifth less CPU a token on 2 cores): the 100k-line target (<= 1.25 x the
    # limit, lmc run in process being the baseline), then 1M lines of we in <= 60 s
    step we16in 90 python3 benchmarks/scaling.py --wheels .whl --games we --lines 100000 \
        --base-lines 20000 --workers 16 --in-process --json "$out/we16in.json"
    step we1Min 130 python3 benchmarks/scaling.py --wheels .whl --games we --lines 1000000 \
        --base-lines 20000 --workers 16 --in-process --json "$out/we1Min.json"
    ;;
5)  # the 1M lines of we served over the protocol, as on 2026-11-26 (96.2 s then)
    step we1M 150 python3 benchmarks/scaling.py --wheels .whl --games we --lines 1000000 \
        --base-lines 20000 --workers 16 --json "$out/we1M.json"
    ;;
4)  # the run-time model's fit (1 worker) and check (ran on 2026-11-26; again if time is left)
    step fit 120 python3 benchmarks/scaling.py --wheels .whl --games we --lines 30000 \
        --workers 1,4,16 --task-cost --json "$out/fit.json"
    ;;
3)  # what decides the next changes: is the model's CPU inflation the machine's (issue 12),
    # and do larger passes or MPS feed the GPU better (issue 13)?
    lscpu | grep -E '^(Model name|Thread|Core|Socket|CPU\(s\)|L3)' || true
    step par16 150 python3 benchmarks/scaling.py --wheels .whl --games we --lines 100000 \
        --base-lines 20000 --workers 16 --parallel-runs --json "$out/par16.json"
    # 16 workers of ~1.4 busy cores each (evaluator and model) ask for 22 of the 16 CPUs
    step fewer 120 python3 benchmarks/scaling.py --wheels .whl --games we --lines 100000 \
        --base-lines 20000 --workers 10,12 --json "$out/fewer.json"
    step batch 180 python3 benchmarks/neural_dist.py --wheels .whl --model smol-skeleton \
        --random-weights --device cuda --lines 30000 --base-lines 300 --workers 16 \
        --batch-size 16,64 --chunk 32
    if command -v nvidia-cuda-mps-control > /dev/null; then
        nvidia-cuda-mps-control -d && echo "MPS daemon started"
        step mps 120 python3 benchmarks/neural_dist.py --wheels .whl --model smol-skeleton \
            --random-weights --device cuda --lines 30000 --base-lines 300 --workers 16 \
            --batch-size 16 --chunk 32
        echo quit | nvidia-cuda-mps-control
    else
        echo "no nvidia-cuda-mps-control: MPS not measured"
    fi
    ;;
6)  # issue 13: one model process for the 16 workers (their queries in its passes) against
    # stage 3's process per worker
    step shared 180 python3 benchmarks/neural_dist.py --wheels .whl --model smol-skeleton \
        --random-weights --device cuda --lines 30000 --base-lines 300 --workers 16 \
        --batch-size 16,64 --chunk 32 --shared 1
    # two servers, each fed by about 8 workers (the host side of one process may limit)
    step shared2 120 python3 benchmarks/neural_dist.py --wheels .whl --model smol-skeleton \
        --random-weights --device cuda --lines 30000 --base-lines 300 --workers 16 \
        --batch-size 64 --chunk 32 --shared 2
    ;;
7)  # one call for a session of 15 device minutes (2026-11-27): issue 13's shared model
    # processes (K = 1, 2, 4, 8 for the 16 workers; passes of 64 rows), then the target's
    # 100k lines with the fastest K; issue 12 with the model in the workers' processes: the
    # machine's own ceiling (16 lmc runs at once) beside lmc-dist --workers 16, then 1M lines
    lscpu | grep -E '^(Model name|Thread|Core|Socket|CPU\(s\)|L3)' || true
    step sweep 160 python3 benchmarks/neural_dist.py --wheels .whl --model smol-skeleton \
        --random-weights --device cuda --lines 10000 --base-lines 300 --workers 16 \
        --batch-size 64 --chunk 32 --shared 1,2,4,8
    best=$(fastest "$out/sweep.log" '--listen \((\d+) shared\)' 4)
    echo "the fastest K: $best"
    step target 150 python3 benchmarks/neural_dist.py --wheels .whl --model smol-skeleton \
        --random-weights --device cuda --lines 100000 --base-lines 300 --workers 16 \
        --batch-size 64 --chunk 32 --shared "$best"
    step we16inpar 100 python3 benchmarks/scaling.py --wheels .whl --games we --lines 100000 \
        --base-lines 20000 --workers 16 --in-process --parallel-runs --json "$out/we16inpar.json"
    step we1Min 120 python3 benchmarks/scaling.py --wheels .whl --games we --lines 1000000 \
        --base-lines 20000 --workers 16 --in-process --json "$out/we1Min.json"
    ;;
8)  # issue 13: where one GPU model process's time goes (stage 7: a shared process is bound
    # by its host side, about 140 us a word with the GPU busy 15%; on 2 CPUs HF's forward
    # costs milliseconds of Python a layer a pass, whatever the rows): we on 1,000 lines with
    # passes of 64 rows, then 200 lines under cProfile and torch.profiler; then, with the
    # MPS daemon, 8 shared processes with passes of 64 and 256 rows (fewer passes a word),
    # and the faster on 100k lines (the target)
    step profile 150 python3 benchmarks/neural.py --wheels .whl --model smol-skeleton \
        --random-weights --device cuda --batch-size 64 --lines 1000 --wc-lines 0 \
        --profile 200 --no-ngram
    nvidia-cuda-mps-control -d && echo "MPS daemon started"
    step passes 190 python3 benchmarks/neural_dist.py --wheels .whl --model smol-skeleton \
        --random-weights --device cuda --lines 10000 --base-lines 50 --workers 16 \
        --batch-size 64,256 --chunk 32 --shared 8
    best=$(fastest "$out/passes.log" '--batch-size (\d+) .*?--listen \(\d+ shared\)' 256)
    echo "the faster --batch-size: $best"
    step target 200 python3 benchmarks/neural_dist.py --wheels .whl --model smol-skeleton \
        --random-weights --device cuda --lines 100000 --base-lines 50 --workers 16 \
        --batch-size "$best" --chunk 32 --shared 8
    echo quit | nvidia-cuda-mps-control
    ;;
9)  # issue 12: 1M lines of we on 16 workers, the model in process, since the scan reads a
    # block of lines at a time (67.3 s on 2026-11-27, of which about 6 s the scan; 4x less
    # CPU on the 2-CPU host): the target is 60 s; "corpus: ... scan N s" is the scan alone
    step we1Min 130 python3 benchmarks/scaling.py --wheels .whl --games we --lines 1000000 \
        --base-lines 20000 --workers 16 --in-process --json "$out/we1Min.json"
    # a 1M-row json corpus (167 MB) scanned with its blocks parsed in 16 helper processes
    # against one process (about 10 s projected there, 4 s on the 2-CPU host); the wheels
    # are those the step above installed
    step jsonscan 90 env PYTHONPATH="$LMC_WHEELS_SITE/lib:$PWD" python3 benchmarks/scan.py \
        --json --lines 1000000 --games we --rounds 2 --helpers
    ;;
*)  echo "stage 1, 2, 3, 4, 5, 6, 7, 8 or 9" >&2; exit 2 ;;
esac
