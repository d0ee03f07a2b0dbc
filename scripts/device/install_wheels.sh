#!/usr/bin/env bash
# On the GPU machine, from the repo root: install the carried wheels (.whl/), pagoda and the
# named in-repo plugins into /tmp/site (no network there).
# Use as: source scripts/device/install_wheels.sh [plugins/platform_cuda ...]
# (WHEELS=folder: the wheels from there instead of .whl/, e.g. a subset carried with other files)
pip_target() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$@"; }
pip_target "${WHEELS:-.whl}"/*.whl || return 1
pip_target --no-build-isolation . "$@" || return 1
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
