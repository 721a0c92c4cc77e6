#!/usr/bin/env bash
# Builds the documentation (docs/) into BUILD_DIR (default build/docs/html),
# warnings as errors. Installs the docs extra of pyproject.toml into the
# active Python. The API pages import the built mpsx: install it (pip install
# .), or build it with tools/dev_build.sh and set PYTHONPATH=build/dev/stage.
#   tools/build_docs.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/build/docs/html}")
cd "$root"

python - <<'PY'
import subprocess, sys, tomllib
requires = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"]
subprocess.run([sys.executable, "-m", "pip", "install", "-q", *requires], check=True)
PY
# In docs/, where `import mpsx` finds the built package rather than the sources in mpsx/.
cd "$root/docs"
python -m sphinx -E -W --keep-going -q -b html -d "$out/../doctrees" . "$out"
echo "docs: $out/index.html"
