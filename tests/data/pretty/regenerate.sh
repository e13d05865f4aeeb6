#!/bin/sh
# Regenerate the fixture logs of this folder with the reference lmchallenge==5.2.
# Usage (from the repository root): sh tests/data/pretty/regenerate.sh
set -eu
LMC=${LMC:-/opt/lmcref/bin/lmc}
HERE=tests/data/pretty
DATA=../shared/data
export PYTHONHASHSEED=0
TRAIN=$DATA/kjv/train.txt.gz
VOCAB=$DATA/vocab/american-english.no-possessive.txt
head -n 6 $DATA/kjv/test.sample.txt > $HERE/kjv6.txt
head -n 8 $DATA/commits/rails.test.sample.jsonl | sed "s/\"userId\"/\"user\"/" > $HERE/rails8.jsonl
for order in 1 2; do
  M="python3 $HERE/toymodel.py $TRAIN --order $order"
  $LMC run "$M" wc < $HERE/kjv6.txt > $HERE/kjv.o$order.wc.jsonl
  $LMC run "$M" we < $HERE/kjv6.txt > $HERE/kjv.o$order.we.jsonl
  head -n 2 $HERE/kjv6.txt | $LMC run "$M" ce > $HERE/kjv.o$order.ce.jsonl
  head -n 3 $HERE/kjv6.txt | $LMC run "$M" wr -n 8 $VOCAB > $HERE/kjv.o$order.wr.jsonl
done
$LMC run "python3 $HERE/toymodel.py $TRAIN" wc < $HERE/rails8.jsonl > $HERE/rails.wc.jsonl
$LMC run "python3 $HERE/toymodel.py $TRAIN" we < $HERE/rails8.jsonl > $HERE/rails.we.jsonl
