# Sourced by the device scripts, at the repository root, on a machine where nothing is installed:
# TE from the wheels in .device/te; memaudit from this tree, with its entry points (the built-in
# targets and classifier plugins are registered by package metadata) from a wheel of this tree in
# .device/dist, made before the call with
#   python -m pip wheel --no-deps --no-build-isolation -w .device/dist .
# Only the wheel's metadata is kept: the code that runs is this tree's. bench/device/device_check.py then
# fails the call unless memaudit is imported from here and registers what pyproject.toml declares.
PY="${PYTHON:-python3}"
if compgen -G ".device/te/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device/te/*.whl || exit 1
fi
rm -rf /tmp/site-ma
if compgen -G ".device/dist/torch_memaudit-*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-ma .device/dist/torch_memaudit-*.whl || exit 1
  rm -rf /tmp/site-ma/memaudit /tmp/site-ma/bin
fi
export PYTHONPATH=/tmp/site:$PWD:/tmp/site-ma PYTHONUNBUFFERED=1
"$PY" bench/device/device_check.py || exit 1
