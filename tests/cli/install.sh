# cinfer as an installed library: `cmake --install` of the tree under test (what `make
# install` runs) into a staging root with PREFIX=/usr, then examples/generate.c compiled
# against the installed header and library through `pkg-config --cflags --libs cinfer`
# (PKG_CONFIG_PATH / PKG_CONFIG_SYSROOT_DIR into the staging root) and run from it
# (LD_LIBRARY_PATH): its greedy text must equal `cinfer generate` with the same settings.
# The same once more linked statically (libcinfer.a + Libs.private), and the installed
# cinfer finding the installed demo model without --model. In a sanitizer tree the example
# is built with the same sanitizers (its library is instrumented). For the `build` tree,
# `make install DESTDIR=... PREFIX=...` itself is run too.
. "$(dirname "$0")/lib.sh"
BUILD=$(dirname "$CINFER")
if [ ! -e "$BUILD/libcinfer.so" ]; then echo "SKIP install: no $BUILD/libcinfer.so in this tree"; exit 0; fi
for tool in pkg-config cc readelf; do
  command -v $tool >/dev/null || { fail "install" "$tool is not installed (scripts/deps.sh)"; exit 1; }
done
ROOT=$TMP/root
ver=$(sed -n 's/^project(cinfer VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
san=
grep -q '^CINFER_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null && san="-fsanitize=address,undefined -fno-omit-frame-pointer"

if DESTDIR=$ROOT cmake --install "$BUILD" --prefix /usr >"$TMP/log" 2>&1; then pass "install: cmake --install into a staging root"
else fail "install: cmake --install" "$(tail -3 "$TMP/log")"; exit 1; fi
for f in usr/bin/cinfer usr/include/cinfer.h usr/lib/libcinfer.so.$ver usr/lib/libcinfer.a usr/lib/pkgconfig/cinfer.pc \
         usr/share/cinfer/models/demo/config.json usr/share/cinfer/models/demo/model.safetensors; do
  [ -e "$ROOT/$f" ] || { fail "install: /$f" "not installed"; continue; }
  pass "install: /$f"
done
# the soname chain: libcinfer.so -> libcinfer.so.MAJOR -> libcinfer.so.VERSION
so0=$(readlink "$ROOT/usr/lib/libcinfer.so.${ver%%.*}"); so=$(readlink "$ROOT/usr/lib/libcinfer.so")
if [ "$so0" = "libcinfer.so.$ver" ] && [ "$so" = "libcinfer.so.${ver%%.*}" ]; then pass "install: symlinks libcinfer.so -> $so -> $so0"
else fail "install: symlinks" "libcinfer.so -> '$so', libcinfer.so.${ver%%.*} -> '$so0'"; fi
grep -qx "prefix=/usr" "$ROOT/usr/lib/pkgconfig/cinfer.pc" && grep -qx "Version: $ver" "$ROOT/usr/lib/pkgconfig/cinfer.pc" \
  && pass "install: cinfer.pc names prefix /usr and version $ver" \
  || fail "install: cinfer.pc" "$(cat "$ROOT/usr/lib/pkgconfig/cinfer.pc")"

export PKG_CONFIG_PATH=$ROOT/usr/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$ROOT PKG_CONFIG_LIBDIR=$ROOT/usr/lib/pkgconfig
flags=$(pkg-config --cflags --libs cinfer 2>"$TMP/err")
case "$flags" in
  *"-I$ROOT/usr/include"*"-L$ROOT/usr/lib"*"-lcinfer"*) pass "install: pkg-config --cflags --libs cinfer = $flags" ;;
  *) fail "install: pkg-config" "got '$flags' $(cat "$TMP/err")" ;;
esac
# shellcheck disable=SC2086
if cc -std=c11 -Wall -Wextra -Werror -pedantic $san examples/generate.c $flags -o "$TMP/generate" 2>"$TMP/err"; then
  pass "install: examples/generate.c builds against the installed library"
else fail "install: examples/generate.c" "$(head -c 400 "$TMP/err")"; exit 1; fi
readelf -d "$TMP/generate" | grep -q "NEEDED.*\[libcinfer.so.${ver%%.*}\]" && pass "install: the example needs libcinfer.so.${ver%%.*}" \
  || fail "install: NEEDED" "$(readelf -d "$TMP/generate" | grep NEEDED)"
export LD_LIBRARY_PATH=$ROOT/usr/lib
# the library it runs with is the installed one
ldd "$TMP/generate" | grep -q "libcinfer.so.${ver%%.*} => $ROOT/usr/lib/" && pass "install: the example loads the installed libcinfer" \
  || fail "install: ldd" "$(ldd "$TMP/generate" | grep cinfer)"

# greedy text through the library = cinfer generate, byte for byte (two prompts, one model
# folder from the source tree and the installed demo model)
for case in "Once upon a time|32|models/demo" "The meaning of life is|20|$ROOT/usr/share/cinfer/models/demo"; do
  IFS='|' read -r prompt n model <<<"$case"
  "$TMP/generate" "$model" "$prompt" "$n" >"$TMP/lib.txt" 2>"$TMP/err"; rc=$?
  LD_LIBRARY_PATH= "$CINFER" generate --model models/demo --prompt "$prompt" --max-tokens "$n" >"$TMP/cli.txt" 2>>"$TMP/err"
  if [ $rc -eq 0 ] && [ -s "$TMP/lib.txt" ] && [ "$(wc -c <"$TMP/lib.txt")" -gt 2 ] && cmp -s "$TMP/lib.txt" "$TMP/cli.txt"; then
    pass "install: example = cinfer generate for '$prompt' ($n tokens, $model)"
  else fail "install: example vs cinfer generate '$prompt'" "rc $rc; lib '$(head -c 200 "$TMP/lib.txt")' cli '$(head -c 200 "$TMP/cli.txt")' $(head -c 300 "$TMP/err")"; fi
done
# errors are one line, exit 1; the usage line names the library's version
expect_err "install: example, missing model folder" "$TMP/none" "$TMP/generate" "$TMP/none" "hi" 8
expect_err "install: example, a model folder without tokenizer.json" "llama_gqa_llama3/tokenizer.json: cannot open" \
  "$TMP/generate" tests/fixtures/llama_gqa_llama3 "hi" 8
"$TMP/generate" >"$TMP/out" 2>"$TMP/err"; rc=$?
[ $rc -eq 2 ] && grep -q "(libcinfer $ver)" "$TMP/err" && pass "install: example usage names libcinfer $ver" \
  || fail "install: example usage" "rc $rc: $(cat "$TMP/err")"

# the CUDA backend, when this tree built it, is found from the installed places: by the
# installed cinfer (../lib/cinfer/) and by a program on libcinfer.so (cinfer/ beside the
# library). Without a GPU the run then fails for the device, not for a missing library.
if [ -e "$BUILD/libcinfer_cuda.so" ]; then
  if [ -e "$ROOT/usr/lib/cinfer/libcinfer_cuda.so" ]; then pass "install: /usr/lib/cinfer/libcinfer_cuda.so"
  else fail "install: /usr/lib/cinfer/libcinfer_cuda.so" "not installed"; fi
  fx=tests/fixtures/qwen3_bf16
  LD_LIBRARY_PATH= "$ROOT/usr/bin/cinfer" generate --model $fx --prompt-ids 1,2,3 --max-tokens 2 --ids --device cuda >/dev/null 2>"$TMP/err"
  grep -q "not found beside" "$TMP/err" && fail "install: installed cinfer finds libcinfer_cuda.so" "$(cat "$TMP/err")" \
    || pass "install: installed cinfer finds libcinfer_cuda.so ($(head -c 120 "$TMP/err"))"
  "$TMP/generate" $fx "hi" 2 cuda >/dev/null 2>"$TMP/err"
  grep -q "not found beside" "$TMP/err" && fail "install: a program on libcinfer.so finds libcinfer_cuda.so" "$(cat "$TMP/err")" \
    || pass "install: a program on libcinfer.so finds libcinfer_cuda.so ($(head -c 120 "$TMP/err"))"
else echo "SKIP install: this tree has no libcinfer_cuda.so (built with nvcc, in the release tree only): the CUDA lookup is not checked"; fi

# static: libcinfer.a with cinfer.pc's Libs.private
priv=$(pkg-config --static --libs-only-l cinfer | sed 's/-lcinfer//')
# shellcheck disable=SC2086
if cc -std=c11 $san examples/generate.c $(pkg-config --cflags cinfer) "$ROOT/usr/lib/libcinfer.a" $priv -o "$TMP/generate-static" 2>"$TMP/err" \
   && ! readelf -d "$TMP/generate-static" | grep -q "NEEDED.*libcinfer" \
   && "$TMP/generate-static" models/demo "Once upon a time" 32 >"$TMP/lib.txt" 2>"$TMP/err" \
   && LD_LIBRARY_PATH= "$CINFER" generate --model models/demo --prompt "Once upon a time" --max-tokens 32 | cmp -s - "$TMP/lib.txt"; then
  pass "install: statically linked with Libs.private ($priv), same text"
else fail "install: static link" "$(head -c 400 "$TMP/err")"; fi

# the installed binary finds the installed demo model without --model (no source tree near it)
LD_LIBRARY_PATH= "$ROOT/usr/bin/cinfer" generate --prompt "Once upon a time" --max-tokens 32 >"$TMP/inst.txt" 2>"$TMP/err"; rc=$?
LD_LIBRARY_PATH= "$CINFER" generate --model models/demo --prompt "Once upon a time" --max-tokens 32 >"$TMP/cli.txt" 2>/dev/null
if [ $rc -eq 0 ] && [ -s "$TMP/inst.txt" ] && cmp -s "$TMP/inst.txt" "$TMP/cli.txt"; then pass "install: installed cinfer runs share/cinfer/models/demo by default"
else fail "install: installed cinfer without --model" "rc $rc $(head -c 300 "$TMP/err")"; fi

# `make install` itself (the build tree it installs from is build/)
if [ "$BUILD" = build ]; then
  if make -s install DESTDIR="$TMP/mk" PREFIX=/opt/cinfer >"$TMP/log" 2>&1 && [ -x "$TMP/mk/opt/cinfer/bin/cinfer" ] \
     && [ -e "$TMP/mk/opt/cinfer/lib/libcinfer.so.${ver%%.*}" ] && grep -qx "prefix=/opt/cinfer" "$TMP/mk/opt/cinfer/lib/pkgconfig/cinfer.pc"; then
    pass "install: make install DESTDIR=... PREFIX=/opt/cinfer"
  else fail "install: make install" "$(tail -3 "$TMP/log")"; fi
fi
