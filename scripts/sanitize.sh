#!/usr/bin/env bash
# Sanitizer builds and fuzzing, outside CI's budget:
#   asan  ASan+UBSan (preset debug: optimised, with debug info) over everything: ctest, then the
#         end-to-end and preprocessing suites with the sanitized sluice binary. Leak checking is
#         on; leaks inside uninstrumented third-party libraries are suppressed in lsan.supp (each
#         entry says why). Reports go to build/debug/sanitizer-reports/, not to stderr (the tests
#         read stderr), and any report fails the script.
#   tsan  TSan over the torch-free modules (libtorch is not built with TSan).
#   fuzz  scripts/fuzz.sh: every libFuzzer target for FUZZ_SECONDS (default 600) each.
#   bash scripts/sanitize.sh [asan|tsan|fuzz ...]   (default: asan tsan fuzz)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$SLUICE_ROOT"
bash scripts/install_deps.sh
export SLUICE_DATASETS=${SLUICE_DATASETS:-$SLUICE_ROOT/../shared/datasets}
steps=("$@")
((${#steps[@]})) || steps=(asan tsan fuzz)
for step in "${steps[@]}"; do
  echo "== $step =="
  case "$step" in
    asan|debug)
      sluice_build debug
      reports=$SLUICE_ROOT/build/debug/sanitizer-reports
      rm -rf "$reports" && mkdir -p "$reports"
      export ASAN_OPTIONS="detect_leaks=1:log_path=$reports/asan:allocator_may_return_null=1"
      export LSAN_OPTIONS="suppressions=$SLUICE_ROOT/lsan.supp:print_suppressions=0"
      export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan"
      ctest --preset debug -j "$(nproc)"
      SLUICE_BIN=$SLUICE_ROOT/build/debug/train/sluice SLUICE_BUILD_DIR=$SLUICE_ROOT/build/debug \
        "$(sluice_python)" -m pytest -q -m "not slow" tests/e2e tests/scripts
      if compgen -G "$reports/*" >/dev/null; then
        echo "sanitize.sh: sanitizer reports (outside lsan.supp):" >&2
        head -n 60 "$reports"/* >&2
        exit 1
      fi
      echo "sanitize.sh: no sanitizer report"
      unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
      ;;
    tsan)
      sluice_build tsan
      ctest --preset tsan -j "$(nproc)"
      ;;
    fuzz)
      bash scripts/fuzz.sh "${FUZZ_SECONDS:-600}"
      ;;
    *) echo "sanitize.sh: unknown step '$step' (expected asan, tsan or fuzz)" >&2; exit 2 ;;
  esac
done
