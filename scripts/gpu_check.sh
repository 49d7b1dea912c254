#!/usr/bin/env bash
# The CUDA build and checks, for a GPU machine that has the CUDA toolkit and a CUDA PyTorch but
# none of sluice's other libraries and no package registry. Here (Debian 12) `stage` downloads
# the Debian packages sluice builds with into .gpu/debs (ignored by git; carry .gpu there);
# there, the other verbs unpack them into a sysroot, build sluice against PyTorch's libtorch
# with -DSLUICE_CUDA=ON and run the GPU tests and benchmarks.
#
#   bash scripts/gpu_check.sh stage       here: .gpu/debs (about 11 MB)
#   bash scripts/gpu_check.sh facts       there: GPU, CPUs, compilers, PyTorch and its C++ ABI
#   bash scripts/gpu_check.sh sysroot     there: unpack .gpu/debs into .gpu/sysroot
#   bash scripts/gpu_check.sh configure   there: cmake build/gpu (SLUICE_CUDA=ON, PyTorch's libtorch)
#   bash scripts/gpu_check.sh build [TARGET...]
#   bash scripts/gpu_check.sh disk        there: random 4 KiB reads at depth 32, sequential GB/s
#   bash scripts/gpu_check.sh data        there: the benchmarks' datasets in build/gpu-data (about
#                                         a minute: a 2M-sample click log (8 x 25M ids), FB15k-237 from
#                                         .gpu/datasets/fb15k-237 when carried; with G20M=1 the
#                                         20M-edge graph of configs/marius_g20m.yaml, ~80 s)
#   bash scripts/gpu_check.sh test        there: ctest (the GPU tests included), the device tests
#                                         (tests/e2e/test_device.py, NCCL's in test_distributed.py)
#   bash scripts/gpu_check.sh sampler     there: the CUDA sampler's test under compute-sanitizer's
#                                         four tools, bench/sampler_vs_numpy.py --cuda
#   bash scripts/gpu_check.sh pytest      there: the rest of pytest against the CUDA build (xdist;
#                                         the install and example tests, which build against an
#                                         installed prefix, are left to the CPU machine)
#   bash scripts/gpu_check.sh bench       there: bench/gpu_bench.py on build/gpu-data
#   bash scripts/gpu_check.sh abi         there: which libstdc++ std::filesystem binds to (the
#                                         checkpoint tests crashed in libtorch's copy before)
#   bash scripts/gpu_check.sh env         prints the exports the verbs use (eval "$(... env)")
#   bash scripts/gpu_check.sh nc [SECONDS]   there: node classification on the GPU in one call
#                                         (its graph, the build, ctest, the device tests, bench --nc
#                                         with the PyTorch Geometric reference); logs in $OUT.
#                                         SKIP_TESTS=1, BUILD_TARGETS="sluice ...", NC_CONFIGS=...
#                                         (gpu_bench.py --nc-configs) make a shorter call
#   bash scripts/gpu_check.sh close tests|bench [SECONDS]   there: the GPU issues' closing checks
#                                         in two calls on one machine (tests and bench --nc; then
#                                         the 20M-edge graph 4x, DLRM, FB15k-237, and with
#                                         DEVCACHE=1 bench/device_cache_bench.py); logs in $OUT
#   bash scripts/gpu_check.sh all [SECONDS]  there: every step above in one call, each time-boxed
#                                         so the whole ends within SECONDS (default 500); logs
#                                         and bench.md in $OUT (default build/gpu-out)
#
# At most 8 files come back from a call: the one-call verbs keep their data and configure logs
# out of $OUT.
#
# Every call there must carry .gpu (the debs and the sysroot the build links against): a call
# without it finds its libraries gone.
#
# Why a sysroot: the GPU machine has no Debian -dev packages and cannot fetch any; `dpkg -x`
# unpacks the same packages CI installs, so the CUDA build compiles against the same RocksDB,
# TBB, yaml-cpp and liburing as the CPU build. PyTorch's libtorch must use the new C++ ABI
# (_GLIBCXX_USE_CXX11_ABI=1) like Debian's libraries, or nothing that passes a std::string
# across them links; `facts` and `configure` check it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
sysroot=$root/.gpu/sysroot
build=$root/build/gpu
# The GPU's pytest files: the device path, and the NCCL process group (a world of one; two ranks
# where two GPUs are visible) with the refusal of Gloo where the build has none.
DEVICE_TESTS=(tests/e2e/test_device.py "tests/e2e/test_distributed.py::test_nccl_trains_the_one_process_model"
              "tests/e2e/test_distributed.py::test_a_build_without_gloo_refuses_in_one_line")
debs=(liburing-dev liburing2 librocksdb-dev librocksdb7.8 libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5
      libcli11-dev libyaml-cpp-dev libyaml-cpp0.7 libgtest-dev libgmock-dev libbenchmark-dev
      libbenchmark1debian zlib1g-dev zlib1g libgflags2.2 libgflags-dev libsnappy1v5 libsnappy-dev
      libbz2-dev libbz2-1.0 liblz4-dev liblz4-1 libzstd-dev libzstd1 pkgconf libpkgconf3 pkgconf-bin
      libjemalloc-dev libjemalloc2)

torch_python() {
  local py
  for py in "${SLUICE_PYTHON:-}" python3 /opt/torch/.venv/bin/python3; do
    [[ -n "$py" ]] && "$py" -c 'import torch' >/dev/null 2>&1 && { command -v "$py"; return 0; }
  done
  echo "gpu_check: no python3 with torch found" >&2
  return 1
}

print_env() {
  local py
  py=$(torch_python)
  echo "export SLUICE_PYTHON=$py"
  echo "export LD_LIBRARY_PATH=$sysroot/usr/lib/x86_64-linux-gnu:$("$py" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  echo "export PKG_CONFIG_PATH=$sysroot/usr/lib/x86_64-linux-gnu/pkgconfig"
  echo "export PKG_CONFIG_SYSROOT_DIR=$sysroot"
  echo "export PATH=$sysroot/usr/bin:\$PATH"
  echo "export SLUICE_BIN=$build/train/sluice"
  echo "export CUBLAS_WORKSPACE_CONFIG=:4096:8"
}

# The one-call verbs (nc, close, all): a clock from the call's start, and each step's time box.
el() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
# Seconds left until `share` percent of the limit has passed (15 at least).
left() { local l=$(( limit * $1 / 100 - ($(date +%s) - t0) )); (( l < 15 )) && l=15; echo $l; }
start_call() {
  limit=$1
  out=${OUT:-$root/build/gpu-out}
  mkdir -p "$out" build/gpu-data
  t0=$(date +%s)
  me=$root/scripts/gpu_check.sh
  py=$(torch_python)
}

case "${1:-}" in
  stage)
    mkdir -p .gpu/debs
    grep -qxF /.gpu/ .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.gpu/ >>.git/info/exclude; }
    (cd .gpu/debs && apt-get download "${debs[@]}" >/dev/null)
    du -sh .gpu/debs
    ;;
  facts)
    py=$(torch_python)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    echo "cpus $(nproc); memory $(free -g | awk '/Mem:/ {print $2}') GiB; disk: $(df -h "$root" | tail -1)"
    gcc --version | head -1; g++ --version | head -1; cmake --version | head -1
    echo "ninja $(ninja --version 2>/dev/null || echo missing); nvcc: $(nvcc --version | tail -2 | head -1)"
    "$py" - <<'PY'
import torch, sys
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "cxx11 abi", torch._C._GLIBCXX_USE_CXX11_ABI, "gpu", torch.cuda.is_available())
print("cmake prefix", torch.utils.cmake_prefix_path)
PY
    ;;
  sysroot)
    [[ -d .gpu/debs ]] || { echo "gpu_check: no .gpu/debs (run 'stage' on the Debian machine and carry .gpu)" >&2; exit 2; }
    rm -rf "$sysroot" && mkdir -p "$sysroot"
    for f in .gpu/debs/*.deb; do dpkg -x "$f" "$sysroot"; done
    # Some packages' CMake files name their libraries by absolute /usr paths (Snappy's
    # targets, RocksDB's bzip2): point those into the sysroot.
    find "$sysroot" -name '*.cmake' -print0 | xargs -0 sed -i -E \
      -e "s#([\";])/usr/(lib/x86_64-linux-gnu/lib|include)#\1$sysroot/usr/\2#g" \
      -e "s#set\(_IMPORT_PREFIX \"/usr\"\)#set(_IMPORT_PREFIX \"$sysroot/usr\")#"
    # pkg-config files say prefix=/usr; PKG_CONFIG_SYSROOT_DIR maps them.
    echo "sysroot: $(du -sh "$sysroot" | cut -f1)"
    ;;
  configure)
    eval "$(print_env)"
    py=$SLUICE_PYTHON
    abi=$("$py" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
    if [[ "$abi" != 1 ]]; then
      echo "gpu_check: this PyTorch's libtorch uses the old C++ ABI; Debian's libraries use the new one" >&2
      exit 1
    fi
    prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA=ON \
      -DSLUICE_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
      -DCMAKE_PREFIX_PATH="$sysroot/usr;$prefix" -DTorch_DIR="$prefix/Torch" \
      -DPKG_CONFIG_EXECUTABLE="$sysroot/usr/bin/pkgconf" -DPython3_EXECUTABLE="$py" "${@:2}"
    ;;
  build)
    eval "$(print_env)"
    shift
    ninja -C "$build" "$@"
    ;;
  disk)
    eval "$(print_env)"
    f=$root/build/gpu-disk.bin
    dd if=/dev/zero of="$f" bs=16M count=128 oflag=direct status=none
    sync
    "$SLUICE_PYTHON" - "$f" <<'PY'
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
import mmap
buf = mmap.mmap(-1, 16 << 20)
start, total = time.perf_counter(), 0
while (n := os.readv(fd, [buf])) > 0:
    total += n
print(f"sequential read: {total / (time.perf_counter() - start) / 1e9:.2f} GB/s ({total >> 30} GiB, 16 MiB O_DIRECT reads)")
PY
    "$build/bench/io_bench" rand --file "$f" --row-bytes 4096 --backend uring --threads 1 --qd 32 --seconds 3
    rm -f "$f"
    ;;
  data)
    py=$(torch_python)
    data=$root/build/gpu-data
    mkdir -p "$data"
    [[ -d "$data/clicks8" || "${SKIP_CLICKS:-0}" == 1 ]] || "$py" scripts/sluice_prep.py gen-clicks --samples 2000000 --sparse 8 \
      --dense 13 --vocab 25000000 --seed 1 --test-frac 0.01 --out "$data/clicks8" >/dev/null
    # configs/marius_g20m.yaml's graph (~80 s): G20M=1 with its 16 partitions, G20M32=1 with 32,
    # G20M64=1 with 64 (bench --g20m-scale: the table 4x the budgets; at d=768 a budget of a
    # quarter of the table holds 2 slots of 32 partitions, both resident, or 4 of 64, one spare)
    for parts in 16 32 64; do
      [[ $parts == 16 && "${G20M:-0}" == 1 ]] || [[ $parts == 32 && "${G20M32:-0}" == 1 ]] ||
        [[ $parts == 64 && "${G20M64:-0}" == 1 ]] || continue
      name=g20m; [[ $parts != 16 ]] && name=g20m$parts
      [[ -d "$data/$name" ]] && continue
      [[ -f "$data/g20m.tsv" ]] || "$py" scripts/sluice_prep.py gen-graph --out "$data/g20m.tsv" --nodes 2000000 \
        --edges 20000000 --seed 1 >/dev/null
      "$py" scripts/sluice_prep.py edges "$data/g20m.tsv" --out "$data/$name" --partitions $parts --test-frac 0.001 >/dev/null
    done
    rm -f "$data/g20m.tsv"
    if [[ "${NC:-0}" == 1 && ! -d "$data/nc4m" ]]; then  # bench --nc's graph (about 80 s)
      "$py" scripts/sluice_prep.py gen-nc --nodes 4000000 --edges 16000000 --undirected --features 128 \
        --classes 16 --train-frac 0.008 --valid-frac 0.001 --test-frac 0.004 --noise 6 --partitions 16 \
        --partitioning degree --seed 1 --out "$data/nc4m" >/dev/null
    fi
    if [[ -d .gpu/datasets/fb15k-237 && ! -d "$data/fb15k-237" && "${SKIP_FB:-0}" != 1 ]]; then
      "$py" scripts/sluice_prep.py kg .gpu/datasets/fb15k-237 --out "$data/fb15k-237" --partitions 4 >/dev/null
    fi
    ls "$data"
    ;;
  test)
    eval "$(print_env)"
    (cd "$build" && ctest -j "$(nproc)" --output-on-failure -LE slow --timeout 300)
    SLUICE_BUILD_DIR=$build "$SLUICE_PYTHON" -m pytest -q -p no:cacheprovider "${DEVICE_TESTS[@]}"
    ;;
  sampler)
    eval "$(print_env)"
    for tool in memcheck racecheck initcheck synccheck; do
      echo "== compute-sanitizer --tool $tool sampler_cuda_test"
      compute-sanitizer --tool "$tool" --error-exitcode 1 --print-limit 10 "$build/tests/sampler_cuda_test" | tail -2
    done
    "$SLUICE_PYTHON" bench/sampler_vs_numpy.py --bench "$build/bench/sampler_bench" --cuda --rounds "${ROUNDS:-3}"
    ;;
  pytest)
    eval "$(print_env)"
    export SLUICE_BUILD_DIR=$build SLUICE_DATASETS=${SLUICE_DATASETS:-$root/.gpu/datasets}
    "$SLUICE_PYTHON" -m pytest -q -p no:cacheprovider -n "${JOBS:-16}" -m "not slow" tests \
      --ignore=tests/e2e/test_library.py --ignore=tests/e2e/test_docs.py --ignore=tests/e2e/test_device.py
    ;;
  bench)
    eval "$(print_env)"
    data=$root/build/gpu-data
    fb=()
    [[ -d "$data/fb15k-237" ]] && fb=(--fb15k "$data/fb15k-237")
    [[ -d "$data/g20m" ]] && fb+=(--g20m "$data/g20m")
    [[ -d "$data/g20m32" ]] && fb+=(--g20m-scale "$data/g20m32")
    [[ -d "$data/nc4m" ]] && fb+=(--nc "$data/nc4m" --pyg-export-bin "$build/bench/nc_blocks_export")
    "$SLUICE_PYTHON" bench/gpu_bench.py --dlrm "$data/clicks8" "${fb[@]}" --bin "$build/train/sluice" \
      --tmp "$root/build" "${@:2}"
    ;;
  abi)
    # Which libstdc++ a CUDA build binds std::filesystem to: PyTorch's wheels export a statically
    # linked copy (pytorch/pytorch#133437), and sluice's checkpoints crashed in it until
    # libstdc++ became a link item before libtorch's (cmake/SluiceDeps.cmake); a check.
    eval "$(print_env)"
    lib=$(dirname "$("$SLUICE_PYTHON" -c 'import torch; print(torch.__file__)')")/lib
    echo "compiler: $(command -v g++) ($(g++ -print-file-name=libstdc++.so))"
    readelf -d "$build/train/sluice" | grep NEEDED | head -4
    ldd "$build/train/sluice" | grep -E "stdc\+\+|torch_cpu"
    echo "std::filesystem symbols libtorch_cpu.so exports: $(nm -D --defined-only "$lib/libtorch_cpu.so" | grep -c _ZNSt10filesystem || true)"
    t=$build/tests/train_test
    if command -v gdb >/dev/null; then
      gdb -q -batch -ex run -ex bt --args "$t" --gtest_filter=CheckpointStoreTest.AMissingFileIsNamed 2>&1 | tail -25
    else
      LD_DEBUG=bindings "$t" --gtest_filter=CheckpointStoreTest.AMissingFileIsNamed 2>&1 | grep filesystem | tail -15
    fi
    ;;
  env)
    print_env
    ;;
  nc)
    # Node classification on the GPU in one call: its graph generated in the background, the
    # build, ctest, the device tests, then bench --nc (with the PyTorch Geometric reference).
    start_call "${2:-540}"
    (NC=1 SKIP_CLICKS=1 bash "$me" data > "$out/data.log" 2>&1; echo "data done at $(( $(date +%s) - t0 )) s" >> "$out/data.log") &
    data_pid=$!
    if [[ "${SKIP_TESTS:-0}" != 1 ]]; then
      el facts; bash "$me" facts
      "$py" -c 'import torch_geometric; print("torch_geometric", torch_geometric.__version__)' 2>&1 | tail -1
      "$py" -c 'import pyg_lib' >/dev/null 2>&1 && echo "pyg-lib: yes" || echo "pyg-lib: no"
      "$py" -c 'import torch_sparse' >/dev/null 2>&1 && echo "torch-sparse: yes" || echo "torch-sparse: no"
    fi
    el sysroot; bash "$me" sysroot
    el configure; bash "$me" configure > "$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
    el build; timeout "$(left "${BUILD_SHARE:-35}")" bash "$me" build -k 0 ${BUILD_TARGETS:-} > "$out/build.log" 2>&1 || {
      grep -E "error|FAILED" "$out/build.log" | head -60 || true; }
    eval "$(print_env)"
    el version; "$build/train/sluice" version | tail -1
    if [[ "${SKIP_TESTS:-0}" != 1 ]]; then
    el disk; timeout 25 bash "$me" disk || true
    el ctest; (cd "$build" && timeout "$(left 50)" ctest -j "$(nproc)" --output-on-failure -LE slow --timeout 60) \
      > "$out/ctest.log" 2>&1 || true
    grep -E "tests passed|tests failed|\*\*\*|Failed|Not Run" "$out/ctest.log" | head -20 || true
    el device tests
    xdist=(); "$SLUICE_PYTHON" -c 'import xdist' 2>/dev/null && xdist=(-n 8)
    SLUICE_BUILD_DIR=$build timeout "$(left 68)" "$SLUICE_PYTHON" -m pytest -q -rs "${xdist[@]}" \
      -p no:cacheprovider "${DEVICE_TESTS[@]}" > "$out/device_tests.log" 2>&1 || true
    tail -15 "$out/device_tests.log"
    fi
    el waiting for the graph; wait "$data_pid" || true; tail -3 "$out/data.log"
    el bench nc; timeout "$(left 99)" "$SLUICE_PYTHON" bench/gpu_bench.py --nc build/gpu-data/nc4m \
      --pyg-export-bin "$build/bench/nc_blocks_export" --bin "$build/train/sluice" --tmp "$root/build" \
      --nc-epochs 2 --nc-configs "${NC_CONFIGS:-host-cpu,host-cuda,gpu,ooc}" > "$out/bench.md" 2> "$out/bench.err" || true
    cat "$out/bench.md"; tail -30 "$out/bench.err"
    el done
    ;;
  close)
    # The closing checks of the GPU issues in two calls on one warm machine (each rebuilds only
    # what is missing): `close tests [SECONDS]` (data in the background, the build, ctest, the
    # whole pytest with the device tests, bench --nc with the PyTorch Geometric reference) and
    # `close bench [SECONDS]` (the 20M-edge graph with its table 4x the budgets, DLRM, FB15k-237).
    phase=${2:-tests}
    start_call "${3:-420}"
    # Two generators side by side: node classification's graph (and FB15k-237), then the click
    # log and the 20M-edge graph; each leaves a mark when done.
    if [[ ! -f build/gpu-data/.done-nc ]]; then
      (NC=1 SKIP_CLICKS=1 bash "$me" data > build/gpu-data/data-nc.log 2>&1; touch build/gpu-data/.done-nc) &
    fi
    if [[ ! -f build/gpu-data/.done-lp ]]; then
      (env "G20M${G20M_PARTS:-64}=1" SKIP_FB=1 SKIP_CLICKS=$([[ $phase == tests ]] && echo 1 || echo 0) bash "$me" data \
        > build/gpu-data/data-lp.log 2>&1; touch build/gpu-data/.done-lp) &
    fi
    if [[ ! -x "$build/train/sluice" ]]; then
      el facts; bash "$me" facts
      el sysroot; bash "$me" sysroot
      el configure; bash "$me" configure > build/configure.log 2>&1 || { tail -40 build/configure.log; exit 1; }
    fi
    el build; timeout "$(left 45)" bash "$me" build -k 0 > "$out/build-$phase.log" 2>&1 || {
      grep -E "error|FAILED" "$out/build-$phase.log" | head -60 || true; }
    tail -1 "$out/build-$phase.log"
    eval "$(print_env)"
    export SLUICE_BUILD_DIR=$build SLUICE_DATASETS=$root/.gpu/datasets
    if [[ $phase == tests ]]; then
      [[ "${SKIP_DISK:-0}" == 1 ]] || { el disk; timeout 20 bash "$me" disk || true; }
      el ctest; (cd "$build" && timeout 60 ctest -j "$(nproc)" --output-on-failure -LE slow --timeout 60) \
        > "$out/ctest.log" 2>&1 || true
      grep -E "tests passed|tests failed|\*\*\*|Failed|Not Run" "$out/ctest.log" | head -20 || true
      xdist=(); "$SLUICE_PYTHON" -c 'import xdist' 2>/dev/null && xdist=(-n "${JOBS:-16}") || echo "no pytest-xdist"
      # -v: each test's outcome is in the log as it finishes, so a stopped run still names its failures.
      el pytest; timeout "$(left "${PYTEST_SHARE:-70}")" "$SLUICE_PYTHON" -m pytest -v -rs -p no:cacheprovider "${xdist[@]}" \
        -m "not slow" tests --ignore=tests/e2e/test_library.py --ignore=tests/e2e/test_docs.py \
        > "$out/pytest.log" 2>&1 || true
      { grep -E "(FAILED|ERROR) " "$out/pytest.log" || true; } | head -20
      echo "$(grep -c " PASSED " "$out/pytest.log" || true) passed so far"; tail -2 "$out/pytest.log"
      # A run stopped by its box prints no tracebacks: the first three failures again, one at a
      # time, with theirs.
      mapfile -t failed < <(grep -oE "(FAILED|ERROR) tests/[^ ]+" "$out/pytest.log" | awk '{print $2}' | sort -u | head -3)
      if (( ${#failed[@]} )); then
        el rerunning the first failures; timeout "$(left "${RERUN_SHARE:-62}")" "$SLUICE_PYTHON" -m pytest -q \
          --tb=short -p no:cacheprovider "${failed[@]}" > "$out/pytest-failed.log" 2>&1 || true
        grep -E "^E |Error|error:" "$out/pytest-failed.log" | head -30 || true
      fi
      el waiting for the graph; while [[ ! -f build/gpu-data/.done-nc ]] && (( $(date +%s) - t0 < limit * 70 / 100 )); do sleep 2; done
      ls build/gpu-data
      pyg=(--pyg-export-bin "$build/bench/nc_blocks_export"); [[ "${NO_PYG:-0}" == 1 ]] && pyg=()
      el bench nc; timeout "$(left "${NC_SHARE:-99}")" "$SLUICE_PYTHON" bench/gpu_bench.py --nc build/gpu-data/nc4m \
        "${pyg[@]}" --bin "$build/train/sluice" --tmp "$root/build" \
        --nc-epochs 2 --nc-configs "${NC_CONFIGS:-host-cpu,gpu-static,gpu,ooc}" > "$out/bench-nc.md" 2> "$out/bench-nc.err" || true
      cat "$out/bench-nc.md"; tail -12 "$out/bench-nc.err"
      while [[ ! -f build/gpu-data/.done-lp ]] && (( $(date +%s) - t0 < limit )); do sleep 2; done  # for `close bench`
      if [[ "${G20M_SCALE:-0}" == 1 ]]; then  # the 20M-edge graph 4x in this call too (the rest of it)
        el bench g20m-scale; timeout "$(left 99)" "$SLUICE_PYTHON" bench/gpu_bench.py --g20m-scale build/gpu-data/g20m${G20M_PARTS:-64} \
          --bin "$build/train/sluice" --tmp "$root/build" --warmup 20 --g20m-steps "${G20M_STEPS:-300}" \
          > "$out/bench-g20m.md" 2> "$out/bench-g20m.err" || true
        cat "$out/bench-g20m.md"; tail -6 "$out/bench-g20m.err"
      fi
    else
      el waiting for the data; while [[ ! -f build/gpu-data/.done-lp || ! -f build/gpu-data/.done-nc ]] \
        && (( $(date +%s) - t0 < limit * 40 / 100 )); do sleep 2; done
      d=build/gpu-data
      if [[ -d $d/fb15k-237 ]]; then
        el bench fb15k; timeout "$(left 25)" "$SLUICE_PYTHON" bench/gpu_bench.py --fb15k $d/fb15k-237 --lp-epochs 3 \
          --bin "$build/train/sluice" --tmp "$root/build" > "$out/bench-fb15k.md" 2> "$out/bench-fb15k.err" || true
        cat "$out/bench-fb15k.md"; tail -6 "$out/bench-fb15k.err"
      fi
      el bench g20m-scale; timeout "$(left 60)" "$SLUICE_PYTHON" bench/gpu_bench.py --g20m-scale $d/g20m${G20M_PARTS:-64} \
        --bin "$build/train/sluice" --tmp "$root/build" --warmup 20 > "$out/bench-g20m.md" 2> "$out/bench-g20m.err" || true
      cat "$out/bench-g20m.md"; tail -6 "$out/bench-g20m.err"
      # `close tests` leaves the click log out (its one-call variant has no DLRM row).
      [[ -d $d/clicks8 ]] || { el click log; SKIP_FB=1 bash "$me" data > build/gpu-data/data-clicks.log 2>&1 || true; }
      el bench dlrm; timeout "$(left 99)" "$SLUICE_PYTHON" bench/gpu_bench.py --dlrm $d/clicks8 --steps 20 --warmup 5 \
        --bin "$build/train/sluice" --tmp "$root/build" > "$out/bench-dlrm.md" 2> "$out/bench-dlrm.err" || true
      cat "$out/bench-dlrm.md"; tail -6 "$out/bench-dlrm.err"
      if [[ "${DEVCACHE:-0}" == 1 ]]; then  # the device cache's planners (lru against the oracle) on the GPU
        el bench device cache; timeout "$(left 99)" "$SLUICE_PYTHON" bench/device_cache_bench.py --device cuda \
          --rounds 1 --workloads dlrm --bin "$build/train/sluice" > "$out/bench-devcache.md" 2>&1 || true
        cat "$out/bench-devcache.md"
      fi
    fi
    el done
    ;;
  all)
    start_call "${2:-500}"
    (bash "$me" data > build/data.log 2>&1 &)
    el facts; bash "$me" facts
    el sysroot; bash "$me" sysroot
    el configure; bash "$me" configure > "$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
    el build; timeout "$(left 57)" bash "$me" build -k 0 > "$out/build.log" 2>&1 || {
      grep -E "error|FAILED" "$out/build.log" | head -60; exit 1; }
    eval "$(print_env)"
    el version; "$build/train/sluice" version | tail -1
    el disk; timeout 25 bash "$me" disk || true
    el ctest; (cd "$build" && timeout "$(left 65)" ctest -j "$(nproc)" --output-on-failure -LE slow --timeout 60) \
      > "$out/ctest.log" 2>&1 || true
    grep -E "tests passed|tests failed|\*\*\*" "$out/ctest.log" | head -20 || true
    grep -q "tests failed" "$out/ctest.log" && { el abi; timeout 30 bash "$me" abi || true; }
    el device tests; SLUICE_BUILD_DIR=$build timeout "$(left 77)" "$SLUICE_PYTHON" -m pytest -q -rs \
      -p no:cacheprovider "${DEVICE_TESTS[@]}" > "$out/device_tests.log" 2>&1 || true
    tail -5 "$out/device_tests.log"
    el bench; timeout "$(left 99)" bash "$me" bench --steps 20 --warmup 5 --lp-epochs 3 \
      > "$out/bench.md" 2> "$out/bench.err" || true
    cat "$out/bench.md"
    el done
    ;;
  *)
    sed -n '2,20p' "$0" >&2
    exit 2
    ;;
esac
