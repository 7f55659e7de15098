# common.sh — sourced by the device-run scripts from the repository root (.gpuz carried): unpacks
# the staged binaries, sets the library path, names them ($T ops test, $C the CLI) and gives ts,
# a timestamped echo. Scripts written before it (2026-12-02[a-e]) carry these lines themselves.
tar xJf .gpuz/gpu.tar.xz
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
T=.gpu/tests/test_cuda_ops C=.gpu/cinfer
O=${OUT:-/tmp/out}; mkdir -p "$O"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
ts() { echo "[$(date -u +%H:%M:%S)] $*"; }
