#!/usr/bin/env bash
# MLflow's official client, one 2.x and the newest 3.x tested (mlflow-skinny: the client without the server), each in
# a virtual environment of its own inside the test one: two versions cannot share an environment, and a script's
# own environment is what reports to the dashboard (tests/test_mlflow.py runs them as subprocesses).
set -euo pipefail
cd "$(dirname "$0")/.."
for version in 2.22.1 3.17.2; do
  dest="${VENV:-.venv}/mlflow-$version"
  [ -x "$dest/bin/python" ] && "$dest/bin/python" -c "import mlflow" 2>/dev/null && continue
  python3 -m venv "$dest"
  "$dest/bin/python" -m pip install -q "mlflow-skinny==$version"
done
