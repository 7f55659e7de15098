# 2026-12-03 (fourteenth session, last call): the GPU suite on the session's final code
# (tests/gpu/run.sh: flash2 prefill attention by default, device chunks of 4096 for the hybrids
# and DeepSeek, hybrid snapshots in device memory), then device_runs/2026-12-03j-diag.sh.
cd "$(dirname "$0")/../.."
. bench/device_runs/common.sh
OUT=$O bash tests/gpu/run.sh 2>&1 | tail -14
grep '^FAIL' $O/logs/*.log 2>/dev/null | head -10
OUT=$O bash bench/device_runs/2026-12-03j-diag.sh
