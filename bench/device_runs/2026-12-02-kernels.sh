#!/bin/bash
# (bench/RESULTS.md, sixth session, 2026-12-02: this is the command of one device call; run it from the
# repository root on the device with .gpuz carried (tests/gpu/stage.sh), as the lines below do)
# call 1: kernel checks (relu2 grouped, moe split/gu2, dsa) + DeepSeek 14-layer A/B. CINFER_CUDA_MOE_GU2
# (the gate+up variant) was dropped after this run: the variable is ignored now.
cd "$(dirname "$0")/../.."
tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64 CINFER_CUDA_UNVERIFIED=1
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
L=$OUT/l; mkdir -p $L
T=.gpu/tests/test_cuda_ops
timeout 150 $T --only moe > $L/ops_moe.log 2>&1; echo "ops moe: $(tail -1 $L/ops_moe.log)"; grep "^FAIL" $L/ops_moe.log | head -5
CINFER_CUDA_MOE_SPLIT=1 CINFER_CUDA_MOE_GU2=1 timeout 150 $T --only moe > $L/ops_moe_new.log 2>&1; echo "ops moe split+gu2: $(tail -1 $L/ops_moe_new.log)"; grep "^FAIL" $L/ops_moe_new.log | head -5
timeout 150 $T --only dsa > $L/ops_dsa.log 2>&1; echo "ops dsa: $(tail -1 $L/ops_dsa.log)"; grep "^FAIL" $L/ops_dsa.log | head -5
timeout 60 $SAN --tool memcheck --error-exitcode 99 $T --quick --only dsa_attend > $L/mc_dsa.log 2>&1; echo "memcheck dsa rc=$?"; tail -1 $L/mc_dsa.log
CINFER_CUDA_MOE_SPLIT=1 CINFER_CUDA_MOE_GU2=1 timeout 60 $SAN --tool memcheck --error-exitcode 99 $T --quick --only moe > $L/mc_moe.log 2>&1; echo "memcheck moe rc=$?"; tail -1 $L/mc_moe.log
CINFER_CUDA_MOE_SPLIT=1 CINFER_CUDA_MOE_GU2=1 PARITY_ONLY='^(nemotron|deepseek_v32|deepseek_v3$|deepseek_v3_fp8|qwen3_moe|mlx_qwen3_moe|lfm2_moe|mlx_lfm2_moe|qwen3_5_moe)' CINFER=$PWD/.gpu/cinfer timeout 120 bash tests/gpu/parity.sh > $L/parity.log 2>&1; echo "parity subset (new switches on): $(grep -c '^PASS' $L/parity.log) PASS, $(grep -c '^FAIL' $L/parity.log) FAIL"; grep '^FAIL' $L/parity.log | head -5
sed 's/"q_lora_rank": null/"q_lora_rank": 1024/' bench/deepseek-v2-lite-dims.config.json > /tmp/dsq.json
.gpu/cinfer make-random --config /tmp/dsq.json --out /tmp/ds14 --dtype bf16 --seed 1 --layers 14 >/dev/null || echo "make failed"
for r in 1 2; do for s in "0 0" "1 0" "0 1" "1 1"; do set -- $s
  echo "== ds14 bf16 SPLIT=$1 GU2=$2 r$r: $(CINFER_CUDA_MOE_SPLIT=$1 CINFER_CUDA_MOE_GU2=$2 .gpu/cinfer bench --model /tmp/ds14 --device cuda --prompt-len 512 --gen 128 2>&1 | grep -E "^decode " | sed 's/  */ /g' | tr '\n' ' ')"
done; done
tar czf $OUT/l.tgz -C $OUT l && rm -rf $L
