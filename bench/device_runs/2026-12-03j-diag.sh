# 2026-12-03 (fourteenth session): (1) the four 16-bit MoE fixtures whose 600-token prompt in one
# device chunk differed from the CPU (parity.sh's long check, run i): the device's logits with
# chunks of 4096, 256 and 64 against the CPU's, and 4096 against 256 (routing near-ties flipped
# by the 16-bit prefill GEMMs, or a fault of the big chunk?); (2) ncu kernel times of Nemotron's
# pp4096 with the session's prefill changes.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
export CINFER_CUDA_UNVERIFIED=1
for fx in deepseek_v3_fp8 mlx_deepseek_v3_4bit mlx_lfm2_moe_6bit mlx_qwen3_next_4bit mlx_qwen3_moe_4bit qwen3_bf16 mlx_lfm2_4bit; do
  f=tests/fixtures/$fx; toks=$(tr -d ' \n' < $f/ref.json | grep -o '"tokens":\[[0-9,]*\]' | sed 's/.*\[\(.*\)\]/\1/')
  long=$toks; while [ $(echo $long | tr ',' '\n' | wc -l) -lt 600 ]; do long="$long,$toks"; done
  $C logits --model $f --tokens "$long" --out /tmp/c.f32 --device cpu 2>/dev/null
  for ch in 4096 256 64; do CINFER_DEVICE_CHUNK=$ch $C logits --model $f --tokens "$long" --out /tmp/g$ch.f32 --device cuda 2>&1 | head -2; done
  python3 - $fx <<'PY'
import array, sys
def rd(p):
    a = array.array('f'); a.frombytes(open(p, 'rb').read()); return a
c = rd('/tmp/c.f32'); V = 300; out = []
def md(a, b):
    d = [abs(x - y) for x, y in zip(a, b)]; m = max(d); return m, d.index(m) // V
for ch in (4096, 256, 64):
    m, r = md(rd('/tmp/g%d.f32' % ch), c); out.append("chunk %d: max %.3g (row %d)" % (ch, m, r))
m, r = md(rd('/tmp/g4096.f32'), rd('/tmp/g256.f32'))
print(sys.argv[1], "vs cpu:", "; ".join(out), "| device 4096 vs 256: %.3g (row %d)" % (m, r))
PY
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
timeout 150 $C make-random --config bench/nemotron-3-nano-30b-a3b.config.json --out /tmp/nemh --dtype bf16 --seed 1 --layers 6 > /dev/null
timeout 100 $NCU --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
  $C bench --model /tmp/nemh --device cuda --prompt-len 4096 --gen 1 > $O/ncu-nemh.txt 2>&1; ts "ncu rc $?"
ts end
