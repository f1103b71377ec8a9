# The GPU backends (included from native/CMakeLists.txt). One kernel source, shaders/*.metal:
#   msl-translate (a host tool built here) lints it and writes, into <build>/shaders,
#   kernels.h (ids and binding indices for the host), msl_sources.cpp (the MSL text, compiled at run time
#   by Metal), <file>.emu.cpp (C++ for the CPU emulator) and, with MOELENS_CUDA, <file>.cu.
# moelens_gpu: the GPU backend's host code, the emulator and its kernels, and the Metal host (on macOS
# against Metal itself; on Linux x86-64 against the mock Objective-C runtime, which runs the emulator).
# moelens_cuda: the CUDA runtime and the translated kernels.

option(MOELENS_METAL "Build the Metal backend (on Linux: over the mock Objective-C runtime and the CPU emulator)" ON)
option(MOELENS_CUDA "Build the CUDA backend (needs nvcc)" OFF)
option(MOELENS_GPU_CHECK "Build moelens-gpu-check (kernel tests), moelens-gpu-bench and moelens-emu-selftest; check the shaders in clang's strict mode" OFF)

set(MOELENS_SHADER_DIR ${CMAKE_CURRENT_SOURCE_DIR}/../shaders)
set(MOELENS_GPU_DIR ${CMAKE_CURRENT_SOURCE_DIR}/backends/gpu)
set(MOELENS_GEN_DIR ${CMAKE_CURRENT_BINARY_DIR}/shaders)
file(GLOB MOELENS_SHADERS CONFIGURE_DEPENDS ${MOELENS_SHADER_DIR}/*.metal)
file(GLOB MOELENS_SHADER_HEADERS CONFIGURE_DEPENDS ${MOELENS_SHADER_DIR}/*.h)
list(SORT MOELENS_SHADERS)

add_executable(msl-translate ${CMAKE_CURRENT_SOURCE_DIR}/tools/msl_translate.cpp)

set(MOELENS_EMU_SOURCES ${MOELENS_GEN_DIR}/emu_table.cpp)
set(MOELENS_CUDA_SOURCES ${MOELENS_GEN_DIR}/cuda_table.cu)
foreach(shader ${MOELENS_SHADERS})
  get_filename_component(stem ${shader} NAME_WE)
  list(APPEND MOELENS_EMU_SOURCES ${MOELENS_GEN_DIR}/${stem}.emu.cpp)
  list(APPEND MOELENS_CUDA_SOURCES ${MOELENS_GEN_DIR}/${stem}.cu)
endforeach()
set(translate_outputs ${MOELENS_GEN_DIR}/kernels.h ${MOELENS_GEN_DIR}/msl_sources.cpp ${MOELENS_EMU_SOURCES})
set(translate_flags)
if(MOELENS_CUDA)
  list(APPEND translate_outputs ${MOELENS_CUDA_SOURCES})
  list(APPEND translate_flags --cuda)
endif()
add_custom_command(
  OUTPUT ${translate_outputs}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${MOELENS_GEN_DIR}
  COMMAND msl-translate --out ${MOELENS_GEN_DIR} ${translate_flags} ${MOELENS_SHADERS}
  DEPENDS msl-translate ${MOELENS_SHADERS} ${MOELENS_SHADER_HEADERS}
  COMMENT "Translating shaders/*.metal"
  VERBATIM)

# One file per op family (ops/*.cpp) over the shared host code.
file(GLOB MOELENS_GPU_OPS CONFIGURE_DEPENDS ${MOELENS_GPU_DIR}/ops/*.cpp)
set(MOELENS_GPU_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/backends/registry.cpp
  ${MOELENS_GPU_DIR}/gpu_backend.cpp
  ${MOELENS_GPU_OPS}
  ${MOELENS_GPU_DIR}/runtimes.cpp
  ${MOELENS_GPU_DIR}/emulator/emu_runtime.cpp
  ${MOELENS_GPU_DIR}/emulator/emulator.cpp
  ${MOELENS_GEN_DIR}/msl_sources.cpp
  ${MOELENS_EMU_SOURCES})
set(MOELENS_HAS_METAL_HOST OFF)
if(MOELENS_METAL)
  if(APPLE)
    list(APPEND MOELENS_GPU_SOURCES ${MOELENS_GPU_DIR}/metal/metal_runtime.cpp)
    set(MOELENS_HAS_METAL_HOST ON)
  elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    list(APPEND MOELENS_GPU_SOURCES ${MOELENS_GPU_DIR}/metal/metal_runtime.cpp ${MOELENS_GPU_DIR}/metal/mock/objc_runtime.cpp
         ${MOELENS_GPU_DIR}/metal/mock/metal_classes.cpp)
    set(MOELENS_HAS_METAL_HOST ON)
  else()
    message(STATUS "moelens: no Metal host on ${CMAKE_SYSTEM_NAME}/${CMAKE_SYSTEM_PROCESSOR} (the mock runtime is x86-64 only)")
  endif()
endif()

add_library(moelens_gpu STATIC ${MOELENS_GPU_SOURCES})
target_include_directories(moelens_gpu PUBLIC ${MOELENS_GEN_DIR} ${MOELENS_SHADER_DIR} ${MOELENS_GPU_DIR})
target_link_libraries(moelens_gpu PUBLIC moelens_core)
# The translated shaders: MSL's `#pragma unroll` and unused kernel parameters are fine.
set_source_files_properties(${MOELENS_EMU_SOURCES} PROPERTIES COMPILE_OPTIONS "-Wno-unknown-pragmas;-Wno-unused-parameter;-Wno-unused-variable")
if(MOELENS_HAS_METAL_HOST)
  target_compile_definitions(moelens_gpu PUBLIC MOELENS_HAS_METAL)
  if(APPLE)
    target_link_libraries(moelens_gpu PUBLIC "-framework Metal" "-framework Foundation" objc)
  endif()
endif()

if(MOELENS_CUDA)
  # Hopper (sm_90) unless chosen: -DCMAKE_CUDA_ARCHITECTURES or CMake's CUDAARCHS variable. Set before
  # enable_language, which otherwise fills in nvcc's own default (an older architecture).
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  add_library(moelens_cuda STATIC ${MOELENS_CUDA_SOURCES} ${MOELENS_GPU_DIR}/cuda/cuda_runtime.cu)
  target_include_directories(moelens_cuda PUBLIC ${MOELENS_GEN_DIR} ${MOELENS_SHADER_DIR} ${MOELENS_GPU_DIR})
  # The directory's host flags (-march=native, -Wall...) are not nvcc's: this target takes only its own.
  set_target_properties(moelens_cuda PROPERTIES COMPILE_OPTIONS "")
  target_compile_options(moelens_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-O3 -lineinfo --expt-relaxed-constexpr -Xcudafe --diag_suppress=177>)
  target_link_libraries(moelens_cuda PUBLIC moelens_core CUDA::cudart)
  target_compile_definitions(moelens_gpu PUBLIC MOELENS_HAS_CUDA)
  target_link_libraries(moelens_gpu PUBLIC moelens_cuda)
endif()

if(MOELENS_GPU_CHECK)
  file(GLOB MOELENS_GPU_CHECK_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tools/gpu_check/*.cpp)
  add_executable(moelens-gpu-check ${MOELENS_GPU_CHECK_SOURCES})
  target_link_libraries(moelens-gpu-check PRIVATE moelens_gpu)
  add_executable(moelens-gpu-bench tools/gpu_bench.cpp)
  target_link_libraries(moelens-gpu-bench PRIVATE moelens_gpu)

  # The emulator's own checks, on kernels that break the rules (emulator/selftest/broken.metal).
  set(selftest_gen ${CMAKE_CURRENT_BINARY_DIR}/emu-selftest)
  set(selftest_src ${MOELENS_GPU_DIR}/emulator/selftest/broken.metal)
  add_custom_command(
    OUTPUT ${selftest_gen}/kernels.h ${selftest_gen}/broken.emu.cpp ${selftest_gen}/emu_table.cpp
    COMMAND ${CMAKE_COMMAND} -E make_directory ${selftest_gen}
    COMMAND msl-translate --out ${selftest_gen} ${selftest_src}
    DEPENDS msl-translate ${selftest_src}
    VERBATIM)
  add_executable(moelens-emu-selftest ${MOELENS_GPU_DIR}/emulator/selftest/selftest.cpp
                 ${MOELENS_GPU_DIR}/emulator/emulator.cpp ${selftest_gen}/broken.emu.cpp ${selftest_gen}/emu_table.cpp)
  target_include_directories(moelens-emu-selftest PRIVATE ${selftest_gen} ${MOELENS_GPU_DIR})
  set_source_files_properties(${selftest_gen}/broken.emu.cpp PROPERTIES COMPILE_OPTIONS "-Wno-unused-parameter;-Wno-unused-variable")
  if(MOELENS_CUDA)
    # The self-test's simdgroup matrix kernel on the GPU (tensor cores), against the same exact products.
    add_custom_command(
      OUTPUT ${selftest_gen}/cuda/broken.cu
      COMMAND ${CMAKE_COMMAND} -E make_directory ${selftest_gen}/cuda
      COMMAND msl-translate --out ${selftest_gen}/cuda --cuda ${selftest_src}
      DEPENDS msl-translate ${selftest_src}
      VERBATIM)
    add_executable(moelens-cuda-matrix-check ${MOELENS_GPU_DIR}/emulator/selftest/cuda_matrices.cu ${selftest_gen}/cuda/broken.cu)
    set_source_files_properties(${selftest_gen}/cuda/broken.cu PROPERTIES HEADER_FILE_ONLY ON)
    target_include_directories(moelens-cuda-matrix-check PRIVATE ${selftest_gen}/cuda ${MOELENS_SHADER_DIR} ${MOELENS_GPU_DIR})
    set_target_properties(moelens-cuda-matrix-check PROPERTIES COMPILE_OPTIONS "")
    target_compile_options(moelens-cuda-matrix-check PRIVATE --expt-relaxed-constexpr -Xcudafe --diag_suppress=177)
    target_link_libraries(moelens-cuda-matrix-check PRIVATE CUDA::cudart)
  endif()
  # Strict mode: the translated shaders compiled by clang with distinct address spaces, so that a
  # device/threadgroup/constant mix-up is an error here as it is for Apple's compiler.
  find_program(MOELENS_CLANGXX NAMES clang++-19 clang++-18 clang++-17 clang++-16 clang++)
  if(MOELENS_CLANGXX)
    set(strict_stamps)
    file(GLOB MOELENS_SHADER_HEADERS CONFIGURE_DEPENDS ${MOELENS_SHADER_DIR}/*.h)  # what every shader includes
    foreach(src ${MOELENS_EMU_SOURCES})
      get_filename_component(stem ${src} NAME_WE)
      set(stamp ${MOELENS_GEN_DIR}/${stem}.strict.stamp)
      add_custom_command(
        OUTPUT ${stamp}
        COMMAND ${MOELENS_CLANGXX} -std=c++17 -fsyntax-only -DMOELENS_MSL_STRICT -Wno-unknown-pragmas
                -I${MOELENS_GEN_DIR} -I${MOELENS_SHADER_DIR} -I${MOELENS_GPU_DIR} ${src}
        COMMAND ${CMAKE_COMMAND} -E touch ${stamp}
        DEPENDS ${src} ${MOELENS_GPU_DIR}/msl/msl.h ${MOELENS_SHADER_HEADERS}
        COMMENT "Strict address spaces (clang): ${stem}"
        VERBATIM)
      list(APPEND strict_stamps ${stamp})
    endforeach()
    add_custom_target(msl-strict ALL DEPENDS ${strict_stamps})
    add_dependencies(moelens-gpu-check msl-strict)
  else()
    message(STATUS "moelens: no clang found; shaders are checked in the emulator's relaxed mode only")
  endif()
endif()
