# Every dependency comes from Debian's packages (tools/setup.sh installs them),
# except CUDA and NCCL, which are optional and auto-detected.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(TBB CONFIG REQUIRED)
find_package(CapnProto CONFIG REQUIRED)
find_package(ZLIB REQUIRED)  # CRC-32 of checkpoint files
find_package(OpenSSL REQUIRED COMPONENTS Crypto SSL)  # HMAC-SHA256 and nonces: proving the job's token; the control plane's TLS identity
find_package(CLI11 CONFIG REQUIRED)  # the `tandem` command line
find_package(nlohmann_json CONFIG REQUIRED)  # every JSON Tandem reads or writes
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)  # content hashes

# OpenBLAS gives the fp32 GEMM of the reference kernels. Debian installs
# several BLAS flavours behind alternatives; pkg-config names the one we want.
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
# libedit (BSD-licensed) gives `tandem repl` its line editing and history.
pkg_check_modules(LIBEDIT REQUIRED IMPORTED_TARGET libedit)
# SentencePiece: the example language models' subword tokenizer.
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)

if(TANDEM_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
  find_package(benchmark CONFIG REQUIRED)
endif()

# CUDA is optional: on by default where a toolkit is found.
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(_tandem_cuda_default ON)
else()
  set(_tandem_cuda_default OFF)
endif()
option(TANDEM_WITH_CUDA "Build the CUDA backend and NCCL transport" ${_tandem_cuda_default})
if(TANDEM_WITH_CUDA)
  # Machine code for the A100 (sm_80) and the H100/H200 (sm_90), and sm_90's
  # PTX, which the driver compiles for any later GPU. Set
  # CMAKE_CUDA_ARCHITECTURES to build for others.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  find_library(TANDEM_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  find_path(TANDEM_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
endif()
message(STATUS "Tandem: CUDA backend ${TANDEM_WITH_CUDA}")

# The Python of the tests and benchmarks: the environment tools/setup.sh
# makes at build/venv of the source tree (tools/python/make_venv.sh), shared
# by every build directory (the sanitizer builds' included). Nothing checks
# it at configure time: a test or benchmark that needs it and finds none
# says which command makes it.
set(TANDEM_PYTHON "${PROJECT_SOURCE_DIR}/build/venv/bin/python" CACHE FILEPATH
    "The Python environment of the tests and benchmarks (tools/python/make_venv.sh)")
