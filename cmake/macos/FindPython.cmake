# CMake's FindPython, for the macOS cross-build (cmake/macos-cross.cmake):
# cross-compiling, it takes no extension suffix from the host's interpreter,
# which is Linux's, so the modules would be named _runtime.so. macOS CPython
# names them as below.
include("${CMAKE_ROOT}/Modules/FindPython.cmake")
if(Python_FOUND)
  set(Python_SOABI "cpython-${Python_VERSION_MAJOR}${Python_VERSION_MINOR}-darwin")
endif()
