#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and runs one for a bounded
# time: scripts/fuzz.sh [SECONDS] [TARGET] (default 60 s of frame_decoder_fuzz; message_encoder_fuzz
# checks encode's cutting of oversized messages; config_file_fuzz the config loader, where a run past
# 10 s or 1 GiB is a finding too; store_decoder_fuzz the c10d store's request decoder). Exits
# non-zero on a finding, leaving the input as
# build-fuzz/crash-*, timeout-* or oom-* (replay: build-fuzz/tests/fuzz/TARGET FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
extra=()
target="${2:-frame_decoder_fuzz}"
usage="usage: scripts/fuzz.sh [SECONDS] [frame_decoder_fuzz|message_encoder_fuzz|config_file_fuzz|store_decoder_fuzz]"
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "$usage" >&2; exit 2; }
case "$target" in
  frame_decoder_fuzz) corpus=(tests/fuzz/corpus tests/fuzz/seeds) ;;
  message_encoder_fuzz) corpus=(tests/fuzz/corpus_encoder) ;;
  store_decoder_fuzz) corpus=(tests/fuzz/corpus_store) ;;
  # relative to build-fuzz/: the corpus that grows, then the committed seeds and the golden files
  config_file_fuzz) corpus=(tests/fuzz/corpus_config ../tests/fuzz/config_seeds ../tests/golden/config)
                    extra=(-timeout=10 -rss_limit_mb=1024 -dict=../tests/fuzz/config.dict) ;;
  *) echo "$usage" >&2; exit 2 ;;
esac

scripts/setup.sh   # cmake and the libraries the configure step finds

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
install() {
  echo "fuzz: installing $*"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@"
}

installed clang || install clang
# libFuzzer's runtime ships in libclang-rt-<major>-dev (Debian 12: clang 14); where that package
# does not exist clang's own packages carry it, and the probe below says when neither does.
major="$(clang++ -dumpversion | cut -d. -f1)"
if ! installed "libclang-rt-$major-dev" && apt-cache show "libclang-rt-$major-dev" >/dev/null 2>&1; then
  install "libclang-rt-$major-dev"
fi
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cc"
clang++ -fsanitize=fuzzer "$probe/p.cc" -o "$probe/p" 2>/dev/null ||
  { echo "fuzz: clang++ $major cannot link libFuzzer (-fsanitize=fuzzer)" >&2; exit 1; }

cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDTL_FUZZ=ON -DDTL_BUILD_TESTS=OFF -DDTL_BUILD_TRAINER=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "$target" frame_corpus

cd build-fuzz
rm -rf tests/fuzz/seeds
tests/fuzz/frame_corpus tests/fuzz/seeds
mkdir -p "${corpus[@]}"
# The corpus grows across runs in build-fuzz/; findings are written to build-fuzz/.
exec "tests/fuzz/$target" -max_total_time="$seconds" -max_len=16384 -print_final_stats=1 "${extra[@]}" "${corpus[@]}"
