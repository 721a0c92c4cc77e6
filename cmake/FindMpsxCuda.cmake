# Finds what the cuda backend builds with: nvcc, the CUDA runtime, cuDNN 9
# and cuBLAS, from the NVIDIA wheels (nvidia-cuda-nvcc, nvidia-cuda-runtime,
# nvidia-cudnn-cu13, nvidia-cublas, ...) of the Python doing the build, an
# isolated build environment included, or from a system install. Enables the
# CUDA language when it finds them.
# Sets MPSX_CUDA_FOUND, MPSX_CUDNN_INCLUDE_DIR, MPSX_CUDNN_LIBRARY,
# MPSX_CUBLAS_LIBRARY, MPSX_CUDA_ARCHITECTURES, or MPSX_CUDA_MISSING.

set(MPSX_CUDA_FOUND FALSE)
set(MPSX_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures of the cuda backend")

# Where the NVIDIA wheels put their headers and libraries.
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
    "import importlib.util, pathlib; s = importlib.util.find_spec('nvidia'); print(';'.join(str(p) for p in (s.submodule_search_locations or [])) if s else '')"
  OUTPUT_VARIABLE MPSX_NVIDIA_ROOTS OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
set(MPSX_CUDA_HINTS "")
foreach(root ${MPSX_NVIDIA_ROOTS})
  list(APPEND MPSX_CUDA_HINTS "${root}/cudnn" "${root}/cu13" "${root}/cublas")
  # nvidia-cuda-nvcc's compiler, where no other is named: it matches the
  # wheels' runtime and headers.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS "${root}/cu13/bin/nvcc")
    set(ENV{CUDACXX} "${root}/cu13/bin/nvcc")
  endif()
endforeach()
# Its nvcc.profile links from lib64, which the wheels lack (they have lib):
# for the test programs that CMake links with nvcc while it configures.
if(NOT CMAKE_CUDA_COMPILER AND "$ENV{CUDACXX}" MATCHES "/nvidia/cu13/bin/nvcc$")
  get_filename_component(directory "$ENV{CUDACXX}/../../lib" ABSOLUTE)
  set(ENV{NVCC_APPEND_FLAGS} "$ENV{NVCC_APPEND_FLAGS} -L${directory}")
endif()

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  set(MPSX_CUDA_MISSING "no working CUDA compiler was found (pip install nvidia-cuda-nvcc nvidia-cuda-crt \
nvidia-cuda-cccl, or a CUDA toolkit's nvcc on PATH or in CUDACXX; why a compiler failed is in \
${CMAKE_BINARY_DIR}/CMakeFiles/CMakeConfigureLog.yaml)")
  return()
endif()
enable_language(CUDA)

# nvidia-cuda-runtime has only the versioned libcudart.so.13, which
# FindCUDAToolkit does not look for.
get_filename_component(MPSX_CUDA_LIBRARY_DIR "${CMAKE_CUDA_COMPILER}/../../lib" ABSOLUTE)
file(GLOB MPSX_VERSIONED_CUDART "${MPSX_CUDA_LIBRARY_DIR}/libcudart.so.[0-9]*")
if(MPSX_VERSIONED_CUDART AND NOT EXISTS "${MPSX_CUDA_LIBRARY_DIR}/libcudart.so")
  list(GET MPSX_VERSIONED_CUDART 0 MPSX_VERSIONED_CUDART)
  set(CUDA_CUDART "${MPSX_VERSIONED_CUDART}" CACHE FILEPATH "The CUDA runtime library")
  set(CUDA_cudart_LIBRARY "${MPSX_VERSIONED_CUDART}" CACHE FILEPATH "The CUDA runtime library")
endif()
find_package(CUDAToolkit)
if(NOT CUDAToolkit_FOUND)
  set(MPSX_CUDA_MISSING "the CUDA toolkit of ${CMAKE_CUDA_COMPILER} was not found: headers \
'${CUDAToolkit_INCLUDE_DIRS}', runtime library '${CUDA_CUDART}' (pip install nvidia-cuda-runtime)")
  return()
endif()

find_path(MPSX_CUDNN_INCLUDE_DIR cudnn.h HINTS ${MPSX_CUDA_HINTS} PATH_SUFFIXES include)
find_library(MPSX_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${MPSX_CUDA_HINTS} PATH_SUFFIXES lib lib64)
find_library(MPSX_CUBLAS_LIBRARY NAMES cublas libcublas.so.13 libcublas.so.12
             HINTS ${MPSX_CUDA_HINTS} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
if(NOT MPSX_CUDNN_INCLUDE_DIR OR NOT MPSX_CUDNN_LIBRARY)
  set(MPSX_CUDA_MISSING "cuDNN 9 was not found (pip install nvidia-cudnn-cu13, or a system cuDNN)")
  return()
endif()
if(NOT MPSX_CUBLAS_LIBRARY)
  set(MPSX_CUDA_MISSING "cuBLAS was not found (pip install nvidia-cublas, or the CUDA toolkit's)")
  return()
endif()
find_path(MPSX_CUBLAS_INCLUDE_DIR cublas_v2.h HINTS ${MPSX_CUDA_HINTS} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
if(NOT MPSX_CUBLAS_INCLUDE_DIR)
  set(MPSX_CUDA_MISSING "cuBLAS's headers (cublas_v2.h) were not found")
  return()
endif()
list(APPEND MPSX_CUDNN_INCLUDE_DIR ${MPSX_CUBLAS_INCLUDE_DIR})
set(MPSX_CUDA_FOUND TRUE)
