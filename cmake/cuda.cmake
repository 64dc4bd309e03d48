# CUDA decisions of the build, made anew at every configure.
#
# scikit-build-core reuses its build directory (build/{wheel_tag}) across installs, and CMake
# keeps in its cache whatever one configure found or was told. So nothing that decides whether
# and how the CUDA handlers are built is taken from the cache of an earlier configure:
# - JAX_ARGREDUCE_CUDA (AUTO, ON, OFF), CMAKE_CUDA_ARCHITECTURES and CMAKE_CUDA_COMPILER count
#   only when given with -D to this configure (CUDAARCHS also gives the architectures);
# - the CUDA compiler is looked for again: CUDACXX, then nvcc on PATH (and $CUDA_PATH/bin), then
#   the nvcc of the nvidia-cuda-nvcc wheel in the Python the module is built for (what
#   `pip install "jax[cuda13]"` brings).

# jax_argreduce_given(<var> <out>): whether <var> was given with -D to this configure. CMake
# gives such cache entries its command-line help string; the options below are dropped from
# the cache once read, and what CMake, this file or an older CMakeLists.txt wrote there
# carries another help string (a compiler cached as NOTFOUND, an older configure's option).
function(jax_argreduce_given var out)
  set(given FALSE)
  if(DEFINED CACHE{${var}})
    get_property(help CACHE ${var} PROPERTY HELPSTRING)
    if(help STREQUAL "No help, variable specified on the command line.")
      set(given TRUE)
    endif()
  endif()
  set(${out} ${given} PARENT_SCOPE)
endfunction()

# jax_argreduce_cuda_mode(<out>): this configure's JAX_ARGREDUCE_CUDA, upper case (AUTO if not
# given), then dropped from the cache.
function(jax_argreduce_cuda_mode out)
  set(mode AUTO)
  jax_argreduce_given(JAX_ARGREDUCE_CUDA given)
  if(given)
    string(TOUPPER "${JAX_ARGREDUCE_CUDA}" mode)
  endif()
  unset(JAX_ARGREDUCE_CUDA CACHE)
  if(NOT mode MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "jax_argreduce: JAX_ARGREDUCE_CUDA must be AUTO, ON or OFF, got "
                        "'${JAX_ARGREDUCE_CUDA}'")
  endif()
  set(${out} "${mode}" PARENT_SCOPE)
endfunction()

# jax_argreduce_cuda_architectures(<out>): this configure's CMAKE_CUDA_ARCHITECTURES, else
# $CUDAARCHS, else SASS for sm_80, sm_90 and sm_100 and PTX for compute_100 (the newest, for
# GPUs after it); then dropped from the cache.
function(jax_argreduce_cuda_architectures out)
  jax_argreduce_given(CMAKE_CUDA_ARCHITECTURES given)
  if(given AND NOT CMAKE_CUDA_ARCHITECTURES STREQUAL "")
    set(archs "${CMAKE_CUDA_ARCHITECTURES}")
  elseif(NOT "$ENV{CUDAARCHS}" STREQUAL "")
    set(archs "$ENV{CUDAARCHS}")
  else()
    set(archs 80-real 90-real 100)
  endif()
  unset(CMAKE_CUDA_ARCHITECTURES CACHE)
  set(${out} "${archs}" PARENT_SCOPE)
endfunction()

# jax_argreduce_probe_python(<python>): sets JAX_ARGREDUCE_WHEEL_NVCC (the nvidia-cuda-nvcc
# wheel's nvcc) and JAX_ARGREDUCE_JAX_CUDA_PLUGIN (the CUDA jax plugin's module), each empty
# when absent, in the caller's scope.
function(jax_argreduce_probe_python python)
  execute_process(
    COMMAND "${python}" "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/cuda_probe.py"
    OUTPUT_VARIABLE probe RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "jax_argreduce: cmake/cuda_probe.py failed in ${python}: ${err}")
  endif()
  string(REGEX MATCH "nvcc=([^\n]*)" _ "${probe}")
  set(JAX_ARGREDUCE_WHEEL_NVCC "${CMAKE_MATCH_1}" PARENT_SCOPE)
  string(REGEX MATCH "plugin=([^\n]*)" _ "${probe}")
  set(JAX_ARGREDUCE_JAX_CUDA_PLUGIN "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

# jax_argreduce_find_nvcc(<out> <how>): the CUDA compiler this configure uses (empty if none),
# and in <how> where it came from.
function(jax_argreduce_find_nvcc out how)
  set(found "")
  set(from "")
  if(NOT "$ENV{CUDACXX}" STREQUAL "")
    get_filename_component(found "$ENV{CUDACXX}" PROGRAM)
    if(NOT EXISTS "${found}")
      message(FATAL_ERROR "jax_argreduce: CUDACXX=$ENV{CUDACXX} does not exist")
    endif()
    set(from "CUDACXX")
  else()
    # PATH and $CUDA_PATH/bin only (not CMake's prefixes), as the README says.
    unset(JAX_ARGREDUCE_NVCC_ON_PATH CACHE)
    find_program(JAX_ARGREDUCE_NVCC_ON_PATH nvcc PATHS "$ENV{CUDA_PATH}/bin" NO_CMAKE_PATH
                 NO_CMAKE_ENVIRONMENT_PATH NO_CMAKE_SYSTEM_PATH)
    if(JAX_ARGREDUCE_NVCC_ON_PATH)
      set(found "${JAX_ARGREDUCE_NVCC_ON_PATH}")
      set(from "PATH")
    elseif(JAX_ARGREDUCE_WHEEL_NVCC)
      set(found "${JAX_ARGREDUCE_WHEEL_NVCC}")
      set(from "the nvidia-cuda-nvcc wheel")
    endif()
    unset(JAX_ARGREDUCE_NVCC_ON_PATH CACHE)
  endif()
  # A compiler given with -D to this configure wins.
  jax_argreduce_given(CMAKE_CUDA_COMPILER given)
  if(given AND CMAKE_CUDA_COMPILER AND NOT CMAKE_CUDA_COMPILER STREQUAL "${found}")
    set(found "${CMAKE_CUDA_COMPILER}")
    set(from "CMAKE_CUDA_COMPILER")
  endif()
  set(${out} "${found}" PARENT_SCOPE)
  set(${how} "${from}" PARENT_SCOPE)
endfunction()

# The fix, for the errors below.
string(CONCAT JAX_ARGREDUCE_CUDA_FIX
    "Looked at CMAKE_CUDA_COMPILER, CUDACXX, nvcc on PATH and in $CUDA_PATH/bin, and the "
    "nvidia-cuda-nvcc wheel (site-packages/nvidia/cu13/bin/nvcc). Either "
    "install one: `pip install nvidia-cuda-nvcc nvidia-cuda-cccl` (CUDA 13 wheels, as "
    "`pip install \"jax[cuda13]\"` brings nvcc) or a CUDA toolkit with nvcc on PATH (or "
    "CUDACXX=/path/to/nvcc), then run the install again; or build the CPU handler only with "
    "`-C cmake.define.JAX_ARGREDUCE_CUDA=OFF`.")
