# libcinfer.so exports the public API and nothing else: the dynamic symbols it defines
# (nm -D --defined-only) are exactly the functions include/cinfer.h declares with CI_API,
# and its soname carries the major version of CMakeLists.txt's project(VERSION).
. "$(dirname "$0")/lib.sh"
BUILD=$(dirname "$CINFER")
lib=$BUILD/libcinfer.so
if [ ! -e "$lib" ]; then echo "SKIP exports: no $lib in this tree"; exit 0; fi
command -v nm >/dev/null || { fail "exports" "nm is not installed (binutils)"; exit 1; }
nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | sort -u >"$TMP/exported"
# every CI_API declaration: the identifier before the first '(' on the line
grep '^CI_API ' include/cinfer.h | sed 's/(.*//' | awk '{print $NF}' | tr -d '*' | sort -u >"$TMP/declared"
n=$(wc -l <"$TMP/declared")
if [ "$n" -lt 10 ]; then fail "exports: cinfer.h" "only $n CI_API declarations found"
elif cmp -s "$TMP/exported" "$TMP/declared"; then pass "exports: libcinfer.so defines exactly the $n CI_API functions of cinfer.h"
else fail "exports" "exported but not declared: $(comm -23 "$TMP/exported" "$TMP/declared" | head -20 | tr '\n' ' '); declared but not exported: $(comm -13 "$TMP/exported" "$TMP/declared" | tr '\n' ' ')"; fi
grep -v '^ci_' "$TMP/exported" >"$TMP/other"
[ -s "$TMP/other" ] && fail "exports: non-ci_ symbols" "$(head -20 "$TMP/other" | tr '\n' ' ')" || pass "exports: every exported symbol has the ci_ prefix"
ver=$(sed -n 's/^project(cinfer VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ -n "$ver" ] && [ "$soname" = "libcinfer.so.${ver%%.*}" ] && [ -f "$BUILD/libcinfer.so.$ver" ] \
  && pass "exports: soname $soname, file libcinfer.so.$ver" || fail "exports: soname" "'$soname' for version '$ver'"
