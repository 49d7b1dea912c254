#!/usr/bin/env bash
# The CUDA checks, for a GPU machine that has the CUDA toolkit but none of sluice's other
# libraries (no package installs there): build the torch-free CUDA targets here, stage them with
# the shared libraries they need in .gpu/ (ignored by git), then run them on the GPU machine.
#   bash scripts/gpu_check.sh stage     here: build build/cuda-gpu, fill .gpu/
#   bash scripts/gpu_check.sh run       there: the CUDA test under compute-sanitizer's four
#                                       tools, then bench/sampler_vs_numpy.py --cuda
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
case "${1:-}" in
  stage)
    cmake -S . -B build/cuda-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA=ON \
      -DSLUICE_WITH_TORCH=OFF -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" >/dev/null
    ninja -C build/cuda-gpu sampler_cuda_test sampler_bench
    rm -rf .gpu && mkdir -p .gpu/lib
    cp build/cuda-gpu/tests/sampler_cuda_test build/cuda-gpu/bench/sampler_bench .gpu/
    # Every non-system library the two binaries load (libtbb, libyaml-cpp, libcudart).
    ldd .gpu/sampler_cuda_test .gpu/sampler_bench | awk '/=> \// {print $3}' | sort -u |
      grep -v -E '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+)\.so' |
      xargs -r -I{} cp -L {} .gpu/lib/
    grep -qxF /.gpu/ .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.gpu/ >>.git/info/exclude; }
    du -sh .gpu
    ;;
  run)
    export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    .gpu/sampler_cuda_test
    for tool in memcheck racecheck initcheck synccheck; do
      echo "== compute-sanitizer --tool $tool"
      compute-sanitizer --tool "$tool" --error-exitcode 1 --print-limit 10 .gpu/sampler_cuda_test |
        tail -3
    done
    python3 bench/sampler_vs_numpy.py --bench .gpu/sampler_bench --cuda --rounds "${ROUNDS:-3}"
    ;;
  *)
    echo "usage: bash scripts/gpu_check.sh stage|run" >&2
    exit 2
    ;;
esac
