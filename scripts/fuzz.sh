#!/usr/bin/env bash
# Fuzzes the readers of untrusted input with libFuzzer (clang, ASan+UBSan; outside CI's budget):
# the config loader with its validation, the dataset manifest, a checkpoint's state.json and
# the recommendation record reader (tests/fuzz/fuzz_targets.h says what each checks).
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]   (default: 600 s each, every target; two at a time)
# A target slower than FUZZ_MIN_EXECS (default 1,000,000) executions in SECONDS runs on until it
# has made them.
# Each target starts from its seed corpus (tests/fuzz/corpus/<target>/) and keeps what it grows
# in build/fuzz/corpus/<target>/. An input that crashes is copied to tests/fuzz/crashes/<target>/,
# where the unit test fuzz_replay_test replays it in every build once the bug is fixed. Prints a
# table of executions, coverage and the outcome per target; exits non-zero on a crash.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$SLUICE_ROOT"
seconds=${1:-600}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(config manifest checkpoint records)
for t in "${targets[@]}"; do
  [[ -d tests/fuzz/corpus/$t ]] || { echo "fuzz.sh: no target '$t' (tests/fuzz/corpus/$t is missing)" >&2; exit 2; }
done
bash scripts/install_deps.sh --fuzz
sluice_build fuzz
out=build/fuzz/runs
mkdir -p "$out"
min_execs=${FUZZ_MIN_EXECS:-1000000}
execs_of() { grep -o 'stat::number_of_executed_units: *[0-9]*' "$1" | grep -o '[0-9]*$' || echo 0; }
run_one() {
  local t=$1 work=build/fuzz/corpus/$1 art=build/fuzz/artifacts/$1/
  mkdir -p "$work" "$art"
  local seeds=(tests/fuzz/corpus/"$t")
  [[ -d tests/fuzz/crashes/$t ]] && seeds+=(tests/fuzz/crashes/"$t")
  # At least SECONDS, then (a slow target) on until min_execs executions in all.
  # -rss_limit_mb: the readers hold at most one input; -timeout: a hang is a finding too.
  local limit=(-max_total_time="$seconds") rc=0 done_execs=0 part=0 start=$SECONDS
  while :; do
    # The records target writes a scratch dataset per input: on tmpfs.
    TMPDIR=/dev/shm ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      build/fuzz/tests/fuzz/fuzz_"$t" "$work" "${seeds[@]}" "${limit[@]}" \
      -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$art" \
      >"$out/$t.$part.log" 2>&1 || rc=$?
    done_execs=$((done_execs + $(execs_of "$out/$t.$part.log")))
    ((rc == 0 && done_execs < min_execs)) || break
    limit=(-runs=$((min_execs - done_execs)))
    part=$((part + 1))
  done
  cat "$out/$t".*.log >"$out/$t.log"
  echo "$rc $done_execs $((SECONDS - start))" >"$out/$t.rc"
}
running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if ((running >= $(nproc))); then wait -n; running=$((running - 1)); fi
done
wait
status=0
printf '| target | seconds | executions | exec/s | coverage (edges) | corpus | outcome |\n|---|---|---|---|---|---|---|\n'
for t in "${targets[@]}"; do
  log=$out/$t.log
  read -r rc execs secs <"$out/$t.rc"
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo ?)
  corpus=$(find "build/fuzz/corpus/$t" -type f | wc -l)
  outcome=clean
  if [[ $rc != 0 ]]; then
    outcome="CRASH (log: $log)"
    status=1
    mkdir -p "tests/fuzz/crashes/$t"
    for f in build/fuzz/artifacts/"$t"/*; do [[ -f "$f" ]] && cp "$f" "tests/fuzz/crashes/$t/"; done
  fi
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$t" "$secs" "$execs" "$((execs / (secs > 0 ? secs : 1)))" \
    "$cov" "$corpus" "$outcome"
done
exit $status
