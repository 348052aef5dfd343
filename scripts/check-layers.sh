#!/usr/bin/env bash
# check-layers.sh - the include rules of DESIGN.md's layers, checked on the
# source tree: the HAL (src/hal) includes nothing from the layers above it
# (engine, sched, api, cli, client), and nothing outside the HAL includes
# one of its *_impl.h or *_internal.h headers (backend plugins, which are
# backends, may: tests/plugins). Exits 1 naming each offending line.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
report() { echo "check-layers: $1" >&2; bad=1; }

while IFS= read -r line; do
  report "the HAL includes a layer above it: $line"
done < <(grep -rnE '#[[:space:]]*include[[:space:]]*"(engine|sched|api|cli|client)/' src/hal || true)

while IFS= read -r line; do
  report "a private header of the HAL is included outside it: $line"
done < <(grep -rnE '#[[:space:]]*include[[:space:]]*"hal/([^"]*/)?[^"/]*_(impl|internal)\.h"' \
           src bench examples include --include='*.c' --include='*.h' --include='*.cu' \
           --include='*.cl' | grep -v '^src/hal/' || true)

if [ "$bad" -eq 0 ]; then
  echo "check-layers: the include rules of the layers hold"
fi
exit "$bad"
