#!/bin/sh
# Regenerate the fixture logs of this folder (every *.jsonl but the corpus rails40.jsonl)
# with the reference lmchallenge==5.2 (wr needs numpy and scipy in its venv).
# Usage, from the repository root:
#   sh tests/data/logs/regenerate.sh
set -eu
LMC=${LMC:-/opt/lmcref/bin/lmc}
HERE=tests/data/logs
DATA=../shared/data
export PYTHONHASHSEED=0
M="python3 $HERE/model.py"
VOCAB=$DATA/vocab/american-english.no-possessive.txt
head -n 30 $DATA/kjv/test.txt > $HERE/kjv30.txt
# marked-up corpus with several users, some with one message only
head -n 40 $DATA/commits/rails.test.sample.jsonl | sed "s/\"userId\"/\"user\"/" > $HERE/rails40.jsonl
$LMC run "$M" wc < $HERE/kjv30.txt > $HERE/kjv.wc.jsonl
$LMC run "$M" we < $HERE/kjv30.txt > $HERE/kjv.we.jsonl
head -n 4 $HERE/kjv30.txt | $LMC run "$M" ce > $HERE/kjv.ce.jsonl
$LMC run "$M" wr -n 12 $VOCAB < $HERE/kjv30.txt > $HERE/kjv.wr.jsonl
$LMC run "$M" wc < $HERE/rails40.jsonl > $HERE/rails.wc.jsonl
$LMC run "$M" we < $HERE/rails40.jsonl > $HERE/rails.we.jsonl
$LMC run "$M" wr -n 8 $VOCAB < $HERE/rails40.jsonl > $HERE/rails.wr.jsonl
# select flags (lmc grep --keep all): skipped tokens, users/messages counted over the selection
$LMC grep -k all '$alphaonly' $HERE/rails.wc.jsonl > $HERE/rails.wc.alphaonly.jsonl
$LMC grep -k all '^[a-m]' $HERE/kjv.wr.jsonl > $HERE/kjv.wr.a-m.jsonl
$LMC grep -k all '$message=[02468]' $HERE/rails.we.jsonl > $HERE/rails.we.even.jsonl
