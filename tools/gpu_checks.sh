#!/usr/bin/env bash
# The GPU checks of a session that is lent a device machine (see benchmarks/RESULTS.md,
# "On a GPU"), in two steps:
#
#   tools/gpu_checks.sh prepare   # here: wheels of the five distributions, gast and astor,
#                                 # into .gpu/whl (ignored by git)
#   bash tools/gpu_checks.sh run  # there, with .gpu carried: install them, then the CUDA
#                                 # tests and issue 14's compiled benchmark; logs in $OUT
#
# The device image has torch, pytest, pytest-xdist and hypothesis but not gast or astor.
# TESTS/BENCH are the seconds each part may take (0 skips it); PYTEST_ARGS narrows the tests
# (default: the tests that skip without a device, `-k cuda`).
set -u
case "${1:-}" in
prepare)
    rm -rf .gpu/whl && mkdir -p .gpu/whl
    for p in core nn control data packed; do
        python3 -m pip wheel -q --no-deps "packages/matchbox-$p" -w .gpu/whl || exit 1
    done
    python3 -m pip download -q --no-deps --only-binary=:all: gast astor -d .gpu/whl || exit 1
    ;;
run)
    export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .gpu/whl/*.whl || exit 3
    { nvidia-smi -L; python3 -c "import sys, torch; print(sys.version); print(torch.__version__)"; } \
        | tee "$OUT/machine.txt"
    if [ "${TESTS:-240}" != 0 ]; then
        timeout "${TESTS:-240}" python3 -m pytest -q -p no:cacheprovider -n 4 -rfEs \
            --junitxml="$OUT/tests.xml" ${PYTEST_ARGS:--k cuda} > "$OUT/tests.log" 2>&1
        echo "pytest rc=$?"; tail -5 "$OUT/tests.log"
    fi
    if [ "${BENCH:-300}" != 0 ]; then
        timeout "${BENCH:-300}" python3 -m benchmarks.compiled --device cuda --batches 64 \
            --repeats 3 --models "README RNN" "adaptive computation" > "$OUT/compiled.log" 2>&1
        echo "bench rc=$?"; tail -20 "$OUT/compiled.log"
    fi
    ;;
*)
    echo "usage: tools/gpu_checks.sh prepare|run" >&2; exit 2 ;;
esac
