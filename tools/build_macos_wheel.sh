#!/usr/bin/env bash
# Cross-builds a macOS arm64 wheel of mpsx on Linux, with the metal backend,
# through the project's own CMakeLists.txt and cmake/macos-cross.cmake
# (docs/metal.md, "What is checked without a Mac"), for the active Python's
# version, and checks it: every library and extension module with
# tools/check_macho.py (Mach-O for arm64, minimum macOS 12.0 as the tag says,
# install names and rpaths, every symbol bound or, in the extension modules,
# the Python C API; ad hoc signatures re-hashed page by page).
#   MPSX_MACOS_SDK=/path/to/sdk OUT=dist tools/build_macos_wheel.sh
#
# A build check, not a release. oneDNN and libomp for macOS are not to be had
# here: stubs of what the Linux libraries of the same versions export stand in
# for them (tools/macos_overlay.py), so the wheel links as a real one would
# and loads nothing behind them. It is versioned +buildcheck and says so in
# mpsx/BUILD_CHECK.txt. The release wheel is built on a Mac by cibuildwheel
# with Homebrew's oneDNN and libomp and delocate (.github/workflows/macos.yml).
# Needs Debian's clang-19, lld-19 and libomp-19-dev, and, in the active Python,
# scikit-build-core (the wheel's metadata), Cython and oneDNN's wheel.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sdk=${MPSX_MACOS_SDK:?must name a macOS SDK (the root/ of hexops/sdk-macos-12.0, for example)}
out=$(mkdir -p "${OUT:-$root/dist}" && cd "${OUT:-$root/dist}" && pwd)
build=${MPSX_MACOS_BUILD:-$root/build/macos}
python=$(command -v python3)
mkdir -p "$build"
"$python" "$root/tools/macos_overlay.py" "$sdk" "$build/overlay"
export MPSX_MACOS_SDK="$sdk" MPSX_MACOS_OVERLAY="$build/overlay" MPSX_MACOS_ARCH=arm64

soabi=$("$python" -c "import sys; print(f'cpython-{sys.version_info[0]}{sys.version_info[1]}-darwin')")
cmake -S "$root" -B "$build/wheel" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$root/cmake/macos-cross.cmake" \
  -DMPSX_CUDA=OFF -DMPSX_METAL=ON -DPython_EXECUTABLE="$python"
ninja -C "$build/wheel"
stage=$build/wheel-stage
rm -rf "$stage" && mkdir -p "$stage"
cmake --install "$build/wheel" --prefix "$stage"
# The package's own files, as scikit-build-core's wheel.packages = ["mpsx"] takes them.
(cd "$root" && git ls-files -z mpsx | xargs -0 cp --parents -t "$stage")
cat > "$stage/mpsx/BUILD_CHECK.txt" <<EOF
This wheel was cross-built on Linux by tools/build_macos_wheel.sh to check the
macOS build. oneDNN and libomp are stubs here (tools/macos_overlay.py): the
package does not load. Build the real wheel on a Mac (docs/metal.md).
EOF

# The metadata as the project's build backend writes it, versioned +buildcheck.
metadata=$build/wheel-metadata
rm -rf "$metadata" && mkdir -p "$metadata"
(cd "$root" && "$python" -c "import sys, scikit_build_core.build as b; print(b.prepare_metadata_for_build_wheel(sys.argv[1]))" \
  "$metadata" | tail -1 > "$metadata/name")
"$python" - "$stage" "$metadata/$(cat "$metadata/name")" "$out" "$soabi" <<'EOF'
import base64, hashlib, pathlib, re, shutil, sys, zipfile
stage, dist_info, out = map(pathlib.Path, sys.argv[1:4])
soabi = sys.argv[4]
metadata = (dist_info / "METADATA").read_text()
version = re.search(r"^Version: (\S+)$", metadata, re.M)[1] + "+buildcheck"
metadata = re.sub(r"^Version: \S+$", f"Version: {version}", metadata, count=1, flags=re.M)
python = soabi.split("-")[1]
tag = f"cp{python}-cp{python}-macosx_12_0_arm64"
name = f"mpsx-{version}.dist-info"
(stage / name).mkdir()
(stage / name / "METADATA").write_text(metadata)
(stage / name / "WHEEL").write_text(f"Wheel-Version: 1.0\nGenerator: mpsx tools/build_macos_wheel.sh\n"
                                    f"Root-Is-Purelib: false\nTag: {tag}\n")
for extra in dist_info.iterdir():
    if extra.is_dir():
        shutil.copytree(extra, stage / name / extra.name)
files = sorted(p for p in stage.rglob("*") if p.is_file())
record = [f"{p.relative_to(stage)},sha256="
          f"{base64.urlsafe_b64encode(hashlib.sha256(p.read_bytes()).digest()).rstrip(b'=').decode()},"
          f"{p.stat().st_size}" for p in files] + [f"{name}/RECORD,,"]
(stage / name / "RECORD").write_text("\n".join(record) + "\n")
wheel = out / f"mpsx-{version}-{tag}.whl"
with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
    for p in files + [stage / name / "RECORD"]:
        info = zipfile.ZipInfo(str(p.relative_to(stage)), date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = (p.stat().st_mode & 0o777) << 16
        z.writestr(info, p.read_bytes(), zipfile.ZIP_DEFLATED)
print(wheel)
EOF

# The check, on the wheel's own contents.
wheel=$(ls -t "$out"/mpsx-*+buildcheck-*-macosx_12_0_arm64.whl | head -1)
check=$build/wheel-check
rm -rf "$check" && mkdir -p "$check" && (cd "$check" && "$python" -m zipfile -e "$wheel" .)
libraries=("$check"/mpsx/*.dylib)
modules=("$check"/mpsx/*."$soabi".so)
[ ${#modules[@]} = 2 ] && [ -e "$check/mpsx/libmpsx_metal.dylib" ] && [ -e "$check/mpsx/libmpsx_runtime.dylib" ] ||
  { echo "build_macos_wheel: $wheel lacks the runtime, the metal backend or the two extension modules"; exit 1; }
"$python" "$root/tools/check_macho.py" --arch arm64 "${libraries[@]}"
"$python" "$root/tools/check_macho.py" --arch arm64 --python-module "${modules[@]}"
echo "build_macos_wheel: $wheel ($(( $(stat -c %s "$wheel") / 1024 )) KiB): a build check (oneDNN and libomp are" \
     "stubs), checked"
