# Finds the chosen dependencies (Debian packages; see scripts/install_deps.sh).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
find_package(TBB REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(RocksDB REQUIRED)
find_package(ZLIB REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
if(SLUICE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(SLUICE_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

if(SLUICE_WITH_TORCH)
  if(NOT Torch_DIR)
    # A CUDA build points at a pip/conda PyTorch: python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'
    set(Torch_DIR /usr/lib/x86_64-linux-gnu/cmake/Torch)
  endif()
  find_package(Torch REQUIRED)
  # Debian's gflags config copies no location onto its convenience target `gflags`, which
  # libtorch's Caffe2 target links: give it the shared library's.
  if(TARGET gflags)
    get_target_property(_gflags_loc gflags IMPORTED_LOCATION)
    if(NOT _gflags_loc)
      find_library(SLUICE_GFLAGS_LIBRARY gflags REQUIRED)
      set_target_properties(gflags PROPERTIES IMPORTED_LOCATION "${SLUICE_GFLAGS_LIBRARY}")
    endif()
  endif()
  # libtorch's headers are a SYSTEM include so their warnings do not break -Werror.
  add_library(sluice_torch INTERFACE)
  # PyTorch's wheels export the std::filesystem of the libstdc++ they link statically
  # (pytorch/pytorch#133437); a program that takes its std::filesystem from libtorch_cpu crashes
  # in it (sluice's checkpoints did against PyTorch 2.11). libstdc++ named right before libtorch
  # on the link line gives those calls the toolchain's own: a static libstdc++ (a GPU machine's
  # g++ 13.3 links it so) is pulled from its archive there, before libtorch_cpu can satisfy
  # them, and a shared one comes before libtorch_cpu in the lookup scope. As a link option
  # (before the objects) the archive contributed nothing, and the crash stayed.
  target_link_libraries(sluice_torch INTERFACE "-Wl,--push-state,--no-as-needed" stdc++
                        "-Wl,--pop-state" ${TORCH_LIBRARIES})
  target_include_directories(sluice_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  # TorchConfig adds its own flags via TORCH_CXX_FLAGS (e.g. the ABI macro).
  separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(sluice_torch INTERFACE ${_torch_flags})
endif()
