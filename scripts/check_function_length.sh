#!/usr/bin/env bash
# Fails when a function in the engine's modules runs past 80 lines (STYLE.md aims at 40-70).
# Uses universal-ctags: one "file:start:end:name" line per function definition.
#   bash scripts/check_function_length.sh [MAX_LINES]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
max=${1:-80}
if ! ctags --version 2>/dev/null | grep -q "Universal Ctags"; then
  echo "check_function_length: universal-ctags is missing (scripts/install_deps.sh installs it)" >&2
  exit 2
fi
long=$(ctags --languages=C++,CUDA --kinds-C++=f --kinds-CUDA=f --fields=+ne -x \
         --_xformat='%F:%n:%e:%N' -R common storage cache prefetch sampler train |
       awk -F: -v max="$max" '$3 != "" { n = $3 - $2 + 1; if (n > max) printf "%s:%s: %s is %d lines (at most %d)\n", $1, $2, $4, n, max }')
if [[ -n "$long" ]]; then
  echo "$long" >&2
  echo "check_function_length: $(wc -l <<<"$long") function(s) past $max lines; split them" >&2
  exit 1
fi
echo "check_function_length: every function in common/ storage/ cache/ prefetch/ sampler/ train/ is at most $max lines"
