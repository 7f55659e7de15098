#!/bin/bash
# 2026-12-04 (twenty-fifth session), fourth call: the final code (publishing through a named
# duplicate, the hybrids' prefix store default) behind cinfer serve --device cuda, three servers
# at once on small fixtures (Qwen3.5-MoE hub layout, DeepSeek V3.2, Nemotron-H; the demo
# tokenizer beside each), each under serve_load.py check with a 150 s soak (random lengths up to
# 600 ids, 30% of clients hanging up mid-stream): concurrent seeded = alone, a cached second
# turn (the one the zh call's Qwen3.5-MoE server missed), no error, the idle pool whole, no 5xx.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
ts start
port=18140
pids=()
for f in qwen3_5_moe_hub deepseek_v32 nemotron_h; do
  d=/tmp/m_$f; rm -rf $d; cp -r tests/fixtures/$f $d; cp models/demo/tokenizer.json models/demo/tokenizer_config.json $d/
  $C serve --model $d --device cuda --port $port --parallel 16 --ctx 2048 --kv-blocks 96 > $O/$f.srv.log 2>&1 &
  pids+=($!)
  ( for i in $(seq 1 100); do grep -q serving $O/$f.srv.log && break; sleep 0.3; done
    timeout 240 python3 bench/serve_load.py check http://127.0.0.1:$port --vocab 300 --max 600 --n 8 --soak 150 > $O/$f.check.log 2>&1
    echo "rc $?" >> $O/$f.check.log ) &
  port=$((port + 1))
done
wait -n 2>/dev/null; sleep 1
for i in $(seq 1 260); do n=$(grep -l "^rc " $O/*.check.log 2>/dev/null | wc -l); [ "$n" -ge 3 ] && break; sleep 1; done
for f in qwen3_5_moe_hub deepseek_v32 nemotron_h; do echo "== $f"; head -1 $O/$f.srv.log | cut -c1-160; cat $O/$f.check.log; done
kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null
ts done
