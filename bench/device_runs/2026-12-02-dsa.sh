#!/bin/bash
# (bench/RESULTS.md, sixth session, 2026-12-02: this is the command of one device call; run it from the
# repository root on the device with .gpuz carried (tests/gpu/stage.sh), as the lines below do)
# DeepSeek V3.2 dims 4 layers, DSA select/score new vs old, at 512 and 32768 tokens
cd "$(dirname "$0")/../.."
[ -x .gpu/cinfer ] || tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
sed -e 's/"q_lora_rank": null/"q_lora_rank": 1024/' -e 's/"deepseek_v3"/"deepseek_v32"/' \
    -e 's/"DeepseekV3ForCausalLM"/"DeepseekV32ForCausalLM"/' \
    -e 's/"n_group": 1,/"n_group": 1, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048,/' \
    bench/deepseek-v2-lite-dims.config.json > /tmp/dsv32.json
[ -d /tmp/dsv32 ] || .gpu/cinfer make-random --config /tmp/dsv32.json --out /tmp/dsv32 --dtype bf16 --seed 1 --layers 4 >/dev/null || echo "make failed"
for pl in 512 32768; do for s in "1 1" "0 0" "1 0" "0 1"; do set -- $s
  [ $pl = 512 ] && [ "$s" != "1 1" ] && [ "$s" != "0 0" ] && continue
  echo "== dsv32 4l pp$pl SELECT=$1 SCORE=$2: $(CINFER_CUDA_DSA_SELECT=$1 CINFER_CUDA_DSA_SCORE=$2 timeout 100 .gpu/cinfer bench --model /tmp/dsv32 --device cuda --prompt-len $pl --gen 64 2>&1 | grep -E "^prefill|^decode " | sed 's/  */ /g' | tr '\n' ' ')"
done; done
