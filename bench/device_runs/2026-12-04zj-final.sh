#!/bin/bash
# 2026-12-04 (twenty-fifth session), last call: the final code (a reply's last block copied
# rather than taken over, hybrids always replaying resumed ids) on the device: test_paged there
# (copy on write at match and truncation, batch graphs = eager, hybrids shared = own), then four
# servers at once on fixtures (qwen3_tied, deepseek_v32, qwen3_5, nemotron_h; the demo tokenizer
# beside each) under serve_load.py check with a 30 s soak, and tests/cli/serve_paged.sh.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
CINFER_TEST_DEVICE=cuda timeout 90 .gpu/tests/test_paged 2>&1 | grep -E "^PASS|^FAIL" | tr '\n' ' '; echo
port=18150
for f in qwen3_tied deepseek_v32 qwen3_5 nemotron_h; do
  d=/tmp/m_$f; rm -rf $d; cp -r tests/fixtures/$f $d; cp models/demo/tokenizer.json models/demo/tokenizer_config.json $d/
  $C serve --model $d --device cuda --port $port --parallel 8 --ctx 1024 --kv-blocks 24 > $O/$f.srv.log 2>&1 &
  ( for i in $(seq 1 100); do grep -q serving $O/$f.srv.log && break; sleep 0.3; done
    timeout 120 python3 bench/serve_load.py check http://127.0.0.1:$port --vocab 300 --max 400 --n 8 --soak 30 > $O/$f.check.log 2>&1
    echo "rc $?" >> $O/$f.check.log; curl -s http://127.0.0.1:$port/metrics | grep -E "^cinfer_kv_(tail_hits|block_copies)" >> $O/$f.check.log
    ) &
  port=$((port + 1))
done
for i in $(seq 1 150); do n=$(grep -l "^rc " $O/*.check.log 2>/dev/null | wc -l); [ "$n" -ge 4 ] && break; sleep 1; done
for f in qwen3_tied deepseek_v32 qwen3_5 nemotron_h; do echo "== $f"; grep -E "^PASS|^FAIL|^rc|^cinfer" $O/$f.check.log | cut -c1-150; done
pkill -f ".gpu/cinfer serve" 2>/dev/null
env CINFER=$PWD/.gpu/cinfer SERVE_DEVICE=cuda timeout 100 bash tests/cli/serve_paged.sh 2>&1 | grep -E "^PASS|^FAIL" | cut -c1-120
ts done
