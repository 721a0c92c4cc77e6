# Cross-builds mpsx for macOS 12 on Linux with Debian's clang 19 and ld64.lld
# against Apple's SDK (tools/check_metal.sh, tools/build_macos_wheel.sh;
# docs/metal.md, "Building for macOS on Linux"). Set in the environment:
#   MPSX_MACOS_SDK      the SDK (hexops/sdk-macos-12.0's root/, for example)
#   MPSX_MACOS_OVERLAY  what tools/macos_overlay.py made beside it
#   MPSX_MACOS_ARCH     arm64 (default) or x86_64
set(CMAKE_SYSTEM_NAME Darwin)
set(CMAKE_SYSTEM_VERSION 21.0)
set(MPSX_MACOS_SDK "$ENV{MPSX_MACOS_SDK}")
set(MPSX_MACOS_OVERLAY "$ENV{MPSX_MACOS_OVERLAY}")
set(MPSX_MACOS_ARCH "$ENV{MPSX_MACOS_ARCH}")
if(NOT MPSX_MACOS_ARCH)
  set(MPSX_MACOS_ARCH arm64)
endif()
if(NOT IS_DIRECTORY "${MPSX_MACOS_SDK}" OR NOT IS_DIRECTORY "${MPSX_MACOS_OVERLAY}")
  message(FATAL_ERROR "macos-cross.cmake: set MPSX_MACOS_SDK to a macOS SDK and MPSX_MACOS_OVERLAY to what "
                      "tools/macos_overlay.py made")
endif()
set(CMAKE_SYSTEM_PROCESSOR ${MPSX_MACOS_ARCH})
set(CMAKE_OSX_SYSROOT "${MPSX_MACOS_SDK}")
set(CMAKE_OSX_ARCHITECTURES ${MPSX_MACOS_ARCH})
set(CMAKE_OSX_DEPLOYMENT_TARGET 12.0)
set(CMAKE_C_COMPILER /usr/bin/clang-19)
set(CMAKE_CXX_COMPILER /usr/bin/clang++-19)
set(CMAKE_OBJCXX_COMPILER /usr/bin/clang++-19)
foreach(language C CXX OBJCXX)
  set(CMAKE_${language}_COMPILER_TARGET ${MPSX_MACOS_ARCH}-apple-macos12.0)
endforeach()
# The SDK's libc++ headers, not Debian's libc++-dev ones, which clang would
# otherwise search first.
set(MPSX_MACOS_CXX_FLAGS "-stdlib=libc++ -nostdinc++ -isystem ${MPSX_MACOS_SDK}/usr/include/c++/v1")
set(CMAKE_CXX_FLAGS_INIT "${MPSX_MACOS_CXX_FLAGS}")
set(CMAKE_OBJCXX_FLAGS_INIT "${MPSX_MACOS_CXX_FLAGS}")
# ld64.lld. Without -mlinker-version clang passes no -platform_version, which
# lld requires. The overlay's stubs (re-export lists restored) come before the
# SDK's.
set(MPSX_MACOS_LINK_FLAGS "-fuse-ld=lld -mlinker-version=711 -stdlib=libc++ -F${MPSX_MACOS_OVERLAY}/Frameworks")
foreach(kind EXE SHARED MODULE)
  set(CMAKE_${kind}_LINKER_FLAGS_INIT "${MPSX_MACOS_LINK_FLAGS}")
endforeach()
# No install_name_tool here: CMake must set install names and rpaths at link
# time (CMake's Darwin rules otherwise rewrite them at install).
set(CMAKE_BUILD_WITH_INSTALL_RPATH ON)
set(CMAKE_INSTALL_NAME_TOOL /usr/lib/llvm-19/bin/llvm-install-name-tool)

# What the SDK and the overlay stand in for: oneDNN, libomp and Python's headers.
set(dnnl_DIR "${MPSX_MACOS_OVERLAY}/dnnl")
set(OpenMP_CXX_FLAGS "-Xclang -fopenmp -I${MPSX_MACOS_OVERLAY}/include")
set(OpenMP_CXX_LIB_NAMES omp)
set(OpenMP_omp_LIBRARY "${MPSX_MACOS_OVERLAY}/lib/libomp.tbd")
list(PREPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_LIST_DIR}/macos")  # FindPython: the extension suffix
file(GLOB MPSX_MACOS_PYTHON_INCLUDE "${MPSX_MACOS_OVERLAY}/python/include/python3*")
set(Python_INCLUDE_DIR "${MPSX_MACOS_PYTHON_INCLUDE}")
set(CMAKE_FIND_ROOT_PATH "${MPSX_MACOS_SDK}" "${MPSX_MACOS_OVERLAY}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
