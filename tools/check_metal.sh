#!/usr/bin/env bash
# Type-checks the metal backend (native/metal/*.mm, or the files given)
# against Apple's macOS SDK headers with clang (docs/metal.md): arm64 and
# x86_64, -fobjc-arc -Wall -Werror -fsyntax-only. Skips, saying so, unless
# MPSX_MACOS_SDK names an SDK (hexops/sdk-macos-12.0's root/, for example).
#   MPSX_MACOS_SDK=/path/to/sdk tools/check_metal.sh [FILE.mm ...]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sdk=${MPSX_MACOS_SDK:-}
if [ -z "$sdk" ]; then
  echo "check_metal: skipped: MPSX_MACOS_SDK is not set (point it at a macOS SDK to type-check native/metal)"
  exit 0
fi
if [ ! -d "$sdk/System/Library/Frameworks/MetalPerformanceShaders.framework/Headers" ]; then
  echo "check_metal: MPSX_MACOS_SDK=$sdk has no MetalPerformanceShaders.framework headers"
  exit 1
fi
clang=${CLANGXX:-clang++}
command -v "$clang" >/dev/null || { echo "check_metal: $clang not found (apt-get install clang)"; exit 1; }
files=("$@")
[ ${#files[@]} -gt 0 ] || files=("$root"/native/metal/*.mm)
[ -e "${files[0]}" ] || { echo "check_metal: no files to check"; exit 1; }
status=0
for target in arm64-apple-macos12 x86_64-apple-macos12; do
  for file in "${files[@]}"; do
    "$clang" -target "$target" -isysroot "$sdk" -stdlib=libc++ -x objective-c++ -std=c++17 -fobjc-arc -Wall -Werror \
      -fsyntax-only -I "$root/native/include" -I "$root/native/metal" "$file" ||
      { echo "check_metal: $file fails for $target"; status=1; }
  done
done
echo "check_metal: ${#files[@]} files for arm64 and x86_64 against $sdk: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
