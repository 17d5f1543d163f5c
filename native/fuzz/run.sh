#!/usr/bin/env bash
# Coverage-guided fuzzing of the native core (libFuzzer, AddressSanitizer, UBSan, LeakSanitizer):
#   native/fuzz/run.sh SECONDS PYTHON
# Builds both harnesses with clang (installed from Debian's packages when missing and this runs as
# root), runs each for SECONDS on a copy of the committed seed corpus, and fails on any finding:
# the input that found it is kept under .fuzz/<harness>/ with the report on stderr.
set -euo pipefail
seconds=${1:-60}
python=${2:-python3}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out="$top/.fuzz"
CLANG=${CLANG:-clang-14}
if ! command -v "$CLANG" >/dev/null || [ ! -e "$("$CLANG" -print-file-name=libclang_rt.fuzzer-x86_64.a)" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing clang and its sanitizer/libFuzzer runtimes (Debian: clang-14 libclang-rt-14-dev)"
        apt-get install -y -q clang-14 libclang-rt-14-dev >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q clang-14 libclang-rt-14-dev >/dev/null; }
    else
        echo "make fuzz needs clang with libFuzzer (Debian: apt-get install clang-14 libclang-rt-14-dev)" >&2
        exit 1
    fi
fi
include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
embed=$("$python" -c 'import sysconfig; d, v = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDVERSION"); print(f"-L{d} -Wl,-rpath,{d} -lpython{v} -ldl -lm")')
flags=(-g -O1 -std=c11 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined)
rm -rf "$out" && mkdir -p "$out/scan/corpus" "$out/thrift/corpus"
"$CLANG" "${flags[@]}" -fsanitize=fuzzer "$here/fuzz_scan.c" -o "$out/scan/fuzz"
"$CLANG" "${flags[@]}" -fsanitize=fuzzer-no-link -I"$include" -c "$here/../ndjson_arrow/_thrift.c" -o "$out/thrift/thrift.o"
# shellcheck disable=SC2086
"$CLANG" "${flags[@]}" -fsanitize=fuzzer -I"$include" "$here/fuzz_thrift.c" "$out/thrift/thrift.o" $embed -o "$out/thrift/fuzz"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export LSAN_OPTIONS="suppressions=$here/lsan.supp:print_suppressions=0"
status=0
for harness in scan thrift; do
    cp "$here/corpus/$harness/"* "$out/$harness/corpus/"
    echo "fuzzing $harness for ${seconds}s"
    (cd "$out/$harness" && ./fuzz -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 corpus 2>"log") || { status=1; tail -n 60 "$out/$harness/log" >&2; }
    grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$out/$harness/log" | sed "s/^/  $harness /" || true
done
exit $status
