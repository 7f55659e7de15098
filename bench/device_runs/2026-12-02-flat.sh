#!/bin/bash
# (bench/RESULTS.md, sixth session, 2026-12-02: this is the command of one device call; run it from the
# repository root on the device with .gpuz carried (tests/gpu/stage.sh), as the lines below do)
# call 4: the hybrids' recurrent layers alone (attention layers turned into linear ones), decode at 1k and 32k
cd "$(dirname "$0")/../.."
[ -x .gpu/cinfer ] || tar xJf .gpuz/gpu.tar.xz
python3 - <<'PY'
import json
c = json.load(open('bench/qwen3.5-35b-a3b.config.json')); t = c.get('text_config', c); t['full_attention_interval'] = 5
json.dump(c, open('/tmp/q35flat.json', 'w'))
c = json.load(open('bench/lfm2-8b-a1b.config.json')); c['layer_types'] = ['conv'] * len(c['layer_types'])
json.dump(c, open('/tmp/lfm2flat.json', 'w'))
c = json.load(open('bench/nemotron-3-nano-30b-a3b.config.json')); c['hybrid_override_pattern'] = c['hybrid_override_pattern'].replace('*', 'M')
json.dump(c, open('/tmp/nemoflat.json', 'w'))
PY
LLAMA_BENCH=/nonexistent BENCH_DIR=/tmp/flat-bench HYB_BUDGET=230 HYB_PP=512 \
  HYB_SPECS="lfm2-conv-only-8l:/tmp/lfm2flat.json:8 nemotron-mamba-moe-only-6l:/tmp/nemoflat.json:6 qwen3.5-deltanet-only-4l:/tmp/q35flat.json:4" \
  BENCH_ONLY=hyb timeout 280 bash tests/gpu/bench.sh > $OUT/flat.log 2>&1; echo "rc=$?"
grep -E "^BENCH" $OUT/flat.log | head -30
rm -rf /tmp/flat-bench
