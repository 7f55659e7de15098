# Drives CMake. `make` builds build/cinfer, and build/libcinfer_cuda.so (the CUDA backend,
# loaded at run time) when nvcc is found; `make test` and `make demo` also install the
# Debian packages the build needs (scripts/deps.sh), so both work on a fresh machine.
# `make install` installs build/'s binary, library, header, cinfer.pc and demo model under
# PREFIX (default /usr/local), staged under DESTDIR when given (CMakeLists.txt lists what).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX ?= /usr/local

.PHONY: all build build-asan build-fuzz deps test test-asan demo clean gpu-stage gpu-stage-lineinfo gpu-stage-prof install

all: build

deps:
	@bash scripts/deps.sh

build:
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build -j $(JOBS)

build-asan:
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCINFER_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j $(JOBS)

build-fuzz:
	@cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DCINFER_FUZZ=ON >/dev/null
	@cmake --build build-fuzz -j $(JOBS)

# The whole suite: unit + parity + CLI + bad input, then the same under ASan/UBSan,
# then a short libFuzzer run. Prints one "N passed, N failed" line at the end.
test: deps
	@bash scripts/fetch-tokenizers.sh
	@$(MAKE) --no-print-directory build build-asan build-fuzz
	@bash tests/run.sh build build-asan build-fuzz

test-asan: deps
	@$(MAKE) --no-print-directory build-asan
	@bash tests/run.sh build-asan

# ldconfig refreshes the loader's cache for libcinfer.so.0 (a real install as root only).
install: build
	@DESTDIR="$(DESTDIR)" cmake --install build --prefix "$(PREFIX)"
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

demo: deps build
	@bash scripts/demo.sh

# The GPU suite: builds here (with nvcc) and packs .gpu/ for the GPU machine, where
# `bash tests/gpu/run.sh` runs it (tests/gpu/stage.sh says what is packed).
# The staged libcinfer_cuda.so comes from build-sass/: the same sources built for sm_90 only
# (no compute_90 PTX: the H200 runs the SASS, and the PTX doubled the packed size past what a
# device call can carry beside the tree).
gpu-stage: build
	@cmake -S . -B build-sass -DCINFER_CUDA_ARCH="-gencode=arch=compute_90,code=sm_90" >/dev/null
	@cmake --build build-sass --target cinfer_cuda -j$$(nproc) >/dev/null
	@STAGE_CUDA_LIB=build-sass/libcinfer_cuda.so bash tests/gpu/stage.sh build

# The same code with line tables in the kernels of LINEINFO's files (nvcc -lineinfo: ncu's source
# view and stall sampling per CUDA line; default the quantized GEMVs, gemv.cu and moe.cu; "all"
# packs to ~11 MiB, more than fits beside the tree), from its own tree so neither rebuilds the
# other; cinfer and the libraries only (STAGE_TESTS=0).
LINEINFO ?= quant_mma;quant_mma_moe;gemv;moe
gpu-stage-lineinfo: build
	@cmake -S . -B build-lineinfo -DCINFER_CUDA_ARCH="-gencode=arch=compute_90,code=sm_90" \
		-DCINFER_CUDA_LINEINFO="$(LINEINFO)" >/dev/null
	@cmake --build build-lineinfo --target cinfer_cuda -j$$(nproc) >/dev/null
	@STAGE_TESTS=0 STAGE_CUDA_LIB=build-lineinfo/libcinfer_cuda.so bash tests/gpu/stage.sh build

# The library with prof.cuh's phase marks compiled in (a measuring build), packed as
# .gpuz/prof.so.xz beside what gpu-stage packs: run with it in place of .gpu/lib's and
# CINFER_CUDA_PROF_OUT=file, then bench/prof_phases.py file.
gpu-stage-prof: build
	@cmake -S . -B build-prof -DCINFER_CUDA_ARCH="-gencode=arch=compute_90,code=sm_90" -DCINFER_CUDA_PROF=ON >/dev/null
	@cmake --build build-prof --target cinfer_cuda -j$$(nproc) >/dev/null
	@mkdir -p .gpuz && xz -T0 -c build-prof/libcinfer_cuda.so > .gpuz/prof.so.xz

clean:
	rm -rf build build-asan build-fuzz build-sass build-lineinfo build-prof .gpu .gpuz
