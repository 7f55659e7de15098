#!/bin/bash
# 2026-12-05 (thirty-third session), call 1 of 3: the whole GPU suite on HEAD (the flash kernel's
# 128-row blocks, and the thirty-second session's last commits, compiled only until now), while
# the Qwen3-30B-A3B-dims checkpoint is made in /tmp/cb (kept while the machine is warm). Call 2
# (2026-12-05r-lcpp.sh, carry .lcsrc: the tree with .gpuz and the source pack passes the 64 MiB
# carry) builds llama-server; call 3 (2026-12-05s-serve-moe.sh) runs the serving bench.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
ts start; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/cb
( nice -n 10 timeout 400 $C make-random --config bench/qwen3-30b-a3b.config.json --out /tmp/cb/qwen3-30b-a3b-12l.part --dtype bf16 \
    --seed 1 --layers 12 > $O/make.log 2>&1 && mv /tmp/cb/qwen3-30b-a3b-12l.part /tmp/cb/qwen3-30b-a3b-12l; echo "make rc $?" >> $O/make.log ) &
MP=$!
OUT=$O/suite timeout 470 bash tests/gpu/run.sh > $O/suite.txt 2>&1; ts "suite rc $?"
tail -22 $O/suite.txt
for i in $(seq 1 $((580 - SECONDS))); do kill -0 $MP 2>/dev/null || break; sleep 1; done
tail -2 $O/make.log; du -sh /tmp/cb/* 2>/dev/null
ts end
