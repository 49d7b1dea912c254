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
  target_link_libraries(sluice_torch INTERFACE ${TORCH_LIBRARIES})
  target_include_directories(sluice_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
  # TorchConfig adds its own flags via TORCH_CXX_FLAGS (e.g. the ABI macro).
  separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(sluice_torch INTERFACE ${_torch_flags})
  # PyTorch's wheels export the std::filesystem of the libstdc++ they link statically
  # (pytorch/pytorch#133437); a program that finds those first crashes in std::filesystem
  # calls (sluice's checkpoints did against PyTorch 2.11). libstdc++ first among the needed
  # libraries binds every such call to the system's.
  target_link_options(sluice_torch INTERFACE "LINKER:--push-state,--no-as-needed" "-lstdc++" "LINKER:--pop-state")
endif()
