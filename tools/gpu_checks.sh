#!/usr/bin/env bash
# The GPU checks of a session that is lent a device machine (see benchmarks/RESULTS.md,
# "On a GPU"), in two steps:
#
#   tools/gpu_checks.sh prepare   # here: wheels of the five distributions, gast and astor,
#                                 # into .gpu/whl (ignored by git)
#   bash tools/gpu_checks.sh run  # there, with .gpu carried: install them, then the CUDA
#                                 # tests, the eager report at batch 128 and the compiled
#                                 # benchmark of every report model; logs in $OUT
#
# The device image has torch, pytest, pytest-xdist and hypothesis but not gast or astor.
# Each part has its own time limit in seconds (0 skips it), so one slow part cannot eat the
# session's device time: TESTS (the CUDA tests; PYTEST_ARGS narrows them, default `-k cuda`),
# CONTROL (benchmarks.control_gpu: eager @batch with and without host reads of masks),
# REPORT (benchmarks.report, eager, batch 128) and COMPILED (benchmarks.compiled, per model).
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
    if [ "${TESTS:-150}" != 0 ]; then
        timeout "${TESTS:-150}" python3 -m pytest -q -p no:cacheprovider -n 4 -rfEs \
            --junitxml="$OUT/tests.xml" ${PYTEST_ARGS:--k cuda} > "$OUT/tests.log" 2>&1
        echo "pytest rc=$?"; tail -5 "$OUT/tests.log"
    fi
    if [ "${CONTROL:-120}" != 0 ]; then
        timeout "${CONTROL:-120}" python3 -m benchmarks.control_gpu --device cuda \
            --batch 128 > "$OUT/control_gpu.log" 2>&1
        echo "control_gpu rc=$?"; tail -20 "$OUT/control_gpu.log"
    fi
    if [ "${REPORT:-150}" != 0 ]; then
        timeout "${REPORT:-150}" python3 -m benchmarks.report --device cuda --batches 128 \
            --repeats 3 > "$OUT/report.log" 2>&1
        echo "report rc=$?"; tail -30 "$OUT/report.log"
    fi
    if [ "${COMPILED:-60}" != 0 ]; then
        for model in "README RNN" "adaptive computation" "TreeLSTM" \
                     "transformer encoder layer" "nn.LSTM"; do
            log="$OUT/compiled-${model// /_}.log"
            timeout "${COMPILED:-60}" python3 -m benchmarks.compiled --device cuda \
                --batches 64 --repeats 3 --models "$model" > "$log" 2>&1
            echo "compiled $model rc=$?"; grep " | " "$log" | tail -6
        done
    fi
    ;;
*)
    echo "usage: tools/gpu_checks.sh prepare|run" >&2; exit 2 ;;
esac
