#!/usr/bin/env bash
# Checks the metal backend against Apple's macOS 12 SDK on Linux
# (docs/metal.md, "What is checked without a Mac"), for arm64 and x86_64:
# 1. compiles every file (native/metal/*.mm, or the files given) with
#    -fobjc-arc -Wall -Werror against the SDK's headers;
# 2. links them as libmpsx_metal.dylib with ld64.lld against the runtime
#    (libmpsx_runtime.dylib, cross-built by CMake with
#    cmake/macos-cross.cmake) and the SDK's stubs, so that a class, selector
#    target or function that macOS 12 or the runtime lacks fails the check;
# 3. checks both libraries with tools/check_macho.py (Mach-O, minimum OS,
#    install names and rpaths, every symbol bound, the ad hoc signature).
# Skips, saying so, unless MPSX_MACOS_SDK names an SDK (hexops/sdk-macos-12.0's
# root/, for example). Needs Debian's clang-19, lld-19 and libomp-19-dev, and
# oneDNN's wheel in the active Python (tools/macos_overlay.py says why).
#   MPSX_MACOS_SDK=/path/to/sdk tools/check_metal.sh [FILE.mm ...]
# MPSX_MACOS_BUILD (default build/macos) keeps the runtime's builds between runs.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sdk=${MPSX_MACOS_SDK:-}
if [ -z "$sdk" ]; then
  echo "check_metal: skipped: MPSX_MACOS_SDK is not set (point it at a macOS SDK to check native/metal)"
  exit 0
fi
if [ ! -d "$sdk/System/Library/Frameworks/MetalPerformanceShaders.framework/Headers" ]; then
  echo "check_metal: MPSX_MACOS_SDK=$sdk has no MetalPerformanceShaders.framework headers"
  exit 1
fi
clang=/usr/bin/clang++-19
for needed in "$clang" /usr/lib/llvm-19/bin/ld64.lld; do
  [ -x "$needed" ] || { echo "check_metal: $needed not found (apt-get install clang-19 lld-19 libomp-19-dev)"; exit 1; }
done
files=("$@")
[ ${#files[@]} -gt 0 ] || files=("$root"/native/metal/*.mm)
[ -e "${files[0]}" ] || { echo "check_metal: no files to check"; exit 1; }
build=${MPSX_MACOS_BUILD:-$root/build/macos}
python=$(command -v python3)
mkdir -p "$build"
"$python" "$root/tools/macos_overlay.py" "$sdk" "$build/overlay" > "$build/overlay.log" 2>&1 ||
  { cat "$build/overlay.log"; exit 1; }
export MPSX_MACOS_SDK="$sdk" MPSX_MACOS_OVERLAY="$build/overlay"

status=0
for arch in arm64 x86_64; do
  target=$arch-apple-macos12.0
  runtime=$build/$arch
  # The runtime, as CMakeLists.txt builds it for macOS.
  if ! { MPSX_MACOS_ARCH=$arch cmake -S "$root" -B "$runtime" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$root/cmake/macos-cross.cmake" \
           -DMPSX_CUDA=OFF -DMPSX_METAL=OFF -DPython_EXECUTABLE="$python" &&
         ninja -C "$runtime" mpsx_runtime; } > "$runtime.log" 2>&1; then
    tail -30 "$runtime.log"
    echo "check_metal: the runtime does not build for $arch (log: $runtime.log)"
    status=1
    continue
  fi
  objects=()
  rm -rf "$runtime/check" && mkdir -p "$runtime/check"
  for file in "${files[@]}"; do
    object=$runtime/check/$(basename "${file%.mm}").o
    "$clang" -target "$target" -isysroot "$sdk" -stdlib=libc++ -nostdinc++ -isystem "$sdk/usr/include/c++/v1" \
      -x objective-c++ -std=c++17 -fobjc-arc -fPIC -Wall -Werror -c -I "$root/native/include" \
      -I "$root/native/metal" "$file" -o "$object" && objects+=("$object") ||
      echo "check_metal: $file fails to compile for $arch"
  done
  [ ${#objects[@]} = ${#files[@]} ] || { status=1; continue; }
  metal=$runtime/check/libmpsx_metal.dylib
  if ! "$clang" -target "$target" -isysroot "$sdk" -stdlib=libc++ -fuse-ld=lld -mlinker-version=711 -dynamiclib \
       -F "$build/overlay/Frameworks" -install_name @rpath/libmpsx_metal.dylib -Wl,-rpath,@loader_path \
       "${objects[@]}" "$runtime/libmpsx_runtime.dylib" -framework Metal -framework MetalPerformanceShaders \
       -framework Foundation -o "$metal"; then
    echo "check_metal: libmpsx_metal.dylib does not link for $arch"
    status=1
    continue
  fi
  "$python" "$root/tools/check_macho.py" --arch "$arch" "$metal" "$runtime/libmpsx_runtime.dylib" || status=1
done
echo "check_metal: ${#files[@]} files for arm64 and x86_64 macOS 12 against $sdk, compiled, linked with the" \
     "runtime and checked: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
