# Finds what the cuda backend builds with: a CUDA compiler and runtime, cuDNN 9
# and cuBLAS, from the NVIDIA wheels (nvidia-cudnn-cu13, nvidia-cublas, ...)
# of the Python doing the build or from a system install.
# Sets MPSX_CUDA_FOUND, MPSX_CUDNN_INCLUDE_DIR, MPSX_CUDNN_LIBRARY,
# MPSX_CUBLAS_LIBRARY, MPSX_CUDA_ARCHITECTURES, or MPSX_CUDA_MISSING.

set(MPSX_CUDA_FOUND FALSE)
set(MPSX_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures of the cuda backend")

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  set(MPSX_CUDA_MISSING "no CUDA compiler (nvcc) was found")
  return()
endif()
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND)
  set(MPSX_CUDA_MISSING "the CUDA toolkit was not found")
  return()
endif()

# Where the NVIDIA wheels put their headers and libraries.
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
    "import importlib.util, pathlib; s = importlib.util.find_spec('nvidia'); print(';'.join(str(p) for p in (s.submodule_search_locations or [])) if s else '')"
  OUTPUT_VARIABLE MPSX_NVIDIA_ROOTS OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
set(MPSX_CUDA_HINTS "")
foreach(root ${MPSX_NVIDIA_ROOTS})
  list(APPEND MPSX_CUDA_HINTS "${root}/cudnn" "${root}/cu13" "${root}/cublas")
endforeach()

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
