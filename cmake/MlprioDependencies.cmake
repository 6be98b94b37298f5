# Finds required and optional dependencies and records what was found for the summary.
# Required: HDF5 (serial), zlib, nlohmann_json, CLI11. Tests: Catch2 2.x. Benchmarks: Google
# Benchmark. Optional (on when found): MPI, CUDA, the configured Slurm source, XGBoost, libcurl.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
# Debian installs serial and Open MPI HDF5 side by side; name the serial one explicitly so the
# h5cc alternative never decides for us. The MPI driver uses its own writer rank (see replay/).
pkg_check_modules(HDF5 REQUIRED IMPORTED_TARGET hdf5-serial)
# Debian's shared libhdf5 pulls in libcurl (its read-only S3 driver) and with it about 30
# libraries, which cost every process ~3 ms to load and map (bench/RESULTS.md, "Start-up"). The
# static archive, where it exists, links only the parts we call (no S3 driver, so no libcurl).
# Every target gets HDF5 from PkgConfig::HDF5, so a process never holds both copies. OFF links
# the shared library (needed, e.g., for HDF5 filter plugins built against it).
option(MLPRIO_HDF5_STATIC "Link HDF5's static archive when the pkg-config folder has one" ON)
set(MLPRIO_HDF5_LINK "shared")
if(MLPRIO_HDF5_STATIC)
  find_library(MLPRIO_HDF5_ARCHIVE NAMES libhdf5.a PATHS ${HDF5_LIBRARY_DIRS} NO_DEFAULT_PATH)
  find_library(MLPRIO_SZIP_LIBRARY NAMES sz)
  if(MLPRIO_HDF5_ARCHIVE AND MLPRIO_SZIP_LIBRARY)
    set_target_properties(PkgConfig::HDF5 PROPERTIES INTERFACE_LINK_LIBRARIES
      "${MLPRIO_HDF5_ARCHIVE};${MLPRIO_SZIP_LIBRARY};ZLIB::ZLIB;Threads::Threads;${CMAKE_DL_LIBS};m")
    set(MLPRIO_HDF5_LINK "static (${MLPRIO_HDF5_ARCHIVE})")
  endif()
endif()

set(_mlprio_summary "")
macro(mlprio_report name found detail)
  if(${found})
    string(APPEND _mlprio_summary "  [x] ${name}: ${detail}\n")
  else()
    string(APPEND _mlprio_summary "  [ ] ${name}: not found ${detail}\n")
  endif()
endmacro()

# ---- MPI ----
set(MLPRIO_WITH_MPI AUTO CACHE STRING "Build the MPI drivers (ON/OFF/AUTO)")
set(MLPRIO_HAVE_MPI OFF)
if(NOT MLPRIO_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C CXX)
  if(MPI_CXX_FOUND)
    set(MLPRIO_HAVE_MPI ON)
  elseif(MLPRIO_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "MLPRIO_WITH_MPI=ON but MPI was not found")
  endif()
endif()
find_program(MLPRIO_MPIEXEC NAMES mpiexec mpirun)
mlprio_report("HDF5 (MLPRIO_HDF5_STATIC)" HDF5_FOUND "${HDF5_VERSION}, ${MLPRIO_HDF5_LINK}")

# ---- libdeflate (optional) ----
# Compresses whole chunks of our HDF5 tables and columns (shuffle + zlib stream, written with
# H5Dwrite_chunk), about twice as fast as HDF5's zlib filter; the files read the same everywhere.
# Linked from its static archive where there is one, so nothing adds a shared library.
option(MLPRIO_WITH_LIBDEFLATE "Compress HDF5 chunks with libdeflate when it is found" ON)
set(MLPRIO_HAVE_LIBDEFLATE OFF)
if(MLPRIO_WITH_LIBDEFLATE)
  find_path(MLPRIO_LIBDEFLATE_INCLUDE_DIR libdeflate.h)
  find_library(MLPRIO_LIBDEFLATE_LIBRARY NAMES libdeflate.a deflate)
  if(MLPRIO_LIBDEFLATE_INCLUDE_DIR AND MLPRIO_LIBDEFLATE_LIBRARY)
    set(MLPRIO_HAVE_LIBDEFLATE ON)
  endif()
endif()
mlprio_report("libdeflate (MLPRIO_WITH_LIBDEFLATE)" MLPRIO_HAVE_LIBDEFLATE
              "${MLPRIO_LIBDEFLATE_LIBRARY}")
mlprio_report("MPI (MLPRIO_WITH_MPI)" MLPRIO_HAVE_MPI "${MPI_CXX_VERSION} ${MLPRIO_MPIEXEC}")

# ---- CUDA ----
set(MLPRIO_WITH_CUDA AUTO CACHE STRING "Build the CUDA kernels and device (ON/OFF/AUTO)")
set(MLPRIO_HAVE_CUDA OFF)
# GPU code generated for the kernels: CMake's CUDA_ARCHITECTURES syntax. The default is machine
# code for A100 (80) and H100/H200 (90) plus PTX for 90, which newer GPUs JIT-compile once. Set
# before enable_language(CUDA), whose own default (75 with CUDA 13) would otherwise be kept.
set(MLPRIO_CUDA_ARCHITECTURES "80-real;90" CACHE STRING
    "CUDA architectures of the kernels (CMAKE_CUDA_ARCHITECTURES syntax; default 80-real;90)")
set(CMAKE_CUDA_ARCHITECTURES ${MLPRIO_CUDA_ARCHITECTURES})
# One CUDA runtime, the shared libcudart.so, as CUDA::cudart links it: nvcc's default (static)
# would put both on the link line.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
if(NOT MLPRIO_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(MLPRIO_HAVE_CUDA ON)
      set(CMAKE_CUDA_STANDARD 20)
    endif()
  endif()
  if(NOT MLPRIO_HAVE_CUDA AND MLPRIO_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MLPRIO_WITH_CUDA=ON but nvcc/CUDA toolkit was not found")
  endif()
endif()
mlprio_report("CUDA (MLPRIO_WITH_CUDA)" MLPRIO_HAVE_CUDA
              "${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")

# ---- Slurm (configured source tree from scripts/bootstrap) ----
set(MLPRIO_WITH_SLURM AUTO CACHE STRING "Build the Slurm plugins (ON/OFF/AUTO)")
set(MLPRIO_SLURM_SRC "/var/cache/mlprio/slurm" CACHE PATH
    "Slurm source tree configured by scripts/bootstrap (needs config.h)")
set(MLPRIO_HAVE_SLURM OFF)
if(NOT MLPRIO_WITH_SLURM STREQUAL "OFF")
  if(EXISTS ${MLPRIO_SLURM_SRC}/config.h AND EXISTS ${MLPRIO_SLURM_SRC}/slurm/slurm.h)
    set(MLPRIO_HAVE_SLURM ON)
  elseif(MLPRIO_WITH_SLURM STREQUAL "ON")
    message(FATAL_ERROR "MLPRIO_WITH_SLURM=ON but ${MLPRIO_SLURM_SRC} is not a configured Slurm source (run scripts/bootstrap)")
  endif()
endif()
# The plugins are built for exactly this version: slurmctld refuses any other micro version.
option(MLPRIO_SLURM_VERSION_CHECK
       "Fail the build when the plugins' Slurm version differs from the installed slurmctld's" ON)
set(MLPRIO_SLURM_VERSION "")
if(MLPRIO_HAVE_SLURM)
  file(STRINGS ${MLPRIO_SLURM_SRC}/config.h _v REGEX "^#define SLURM_VERSION_STRING ")
  string(REGEX REPLACE ".*\"(.*)\".*" "\\1" MLPRIO_SLURM_VERSION "${_v}")
  find_program(MLPRIO_SLURMCTLD slurmctld PATHS /usr/sbin)
  if(MLPRIO_SLURMCTLD)
    execute_process(COMMAND ${MLPRIO_SLURMCTLD} -V OUTPUT_VARIABLE _ctld ERROR_QUIET
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    string(REGEX REPLACE ".* " "" _ctld "${_ctld}")
    if(_ctld AND NOT _ctld STREQUAL MLPRIO_SLURM_VERSION)
      message(WARNING "Slurm source ${MLPRIO_SLURM_SRC} is ${MLPRIO_SLURM_VERSION} but "
              "${MLPRIO_SLURMCTLD} is ${_ctld}: slurmctld will refuse the plugins (run "
              "scripts/bootstrap to fetch and configure the matching source)")
    endif()
  endif()
endif()
mlprio_report("Slurm plugins (MLPRIO_WITH_SLURM)" MLPRIO_HAVE_SLURM
              "${MLPRIO_SLURM_SRC}, Slurm ${MLPRIO_SLURM_VERSION}")

# ---- XGBoost ----
find_library(MLPRIO_XGBOOST_LIB xgboost)
find_path(MLPRIO_XGBOOST_INCLUDE xgboost/c_api.h)
set(MLPRIO_HAVE_XGBOOST OFF)
if(MLPRIO_XGBOOST_LIB AND MLPRIO_XGBOOST_INCLUDE)
  set(MLPRIO_HAVE_XGBOOST ON)
endif()
mlprio_report("XGBoost" MLPRIO_HAVE_XGBOOST "${MLPRIO_XGBOOST_LIB}")

# ---- libcurl ----
find_package(CURL)
mlprio_report("libcurl" CURL_FOUND "${CURL_VERSION_STRING}")

# ---- tests and benchmarks ----
if(MLPRIO_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
  include(Catch)
endif()
if(MLPRIO_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

function(mlprio_print_summary)
  message(STATUS "mlprio ${PROJECT_VERSION} optional parts:\n${_mlprio_summary}")
endfunction()
