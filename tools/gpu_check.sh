#!/bin/bash
# The GPU check of seqzoo's Triton kernels: run from the repository root on a machine with an NVIDIA GPU, torch
# and triton installed (docs/benchmarks.md, "What has run on a GPU"). Writes everything to $OUT (default
# results/gpu-check): summary.log, env.log, models.log (whole models and the dispatch's own tests),
# sweep/sweep.jsonl (every autotune config alone), train.log, tests.log (the op tests at real shapes and the peers),
# failures.log (each failing test's traceback as it fails: a phase stopped at its limit prints no summary),
# kernels-<op>/ and kbench.log, cubin_usage.txt. With TARBALL=path, all of it is also packed into that one file
# after every phase (a device tool that returns few files, or a run stopped at its limit, still gets what finished).
#
# The test and training phases run with SEQZOO_AUTOTUNE=first (kernels/prune.py): each launch compiles configs only
# until one fits and benchmarks none, so the minutes go to the tests (full autotuning let 272 of 413 op tests finish
# in two runs of an H200 session; one causal-conv test tuned for 186 s). The benchmark phase tunes over every config.
#
#   bash tools/gpu_check.sh          # about 9 minutes; phases in order of what they prove, each with its limit
#   T_MODELS=300 T_SWEEP=600 T_TEST=600 T_TRAIN=120 T_OP=300 bash tools/gpu_check.sh   # longer (T_OP: every op)
#   BENCH_OPS="scan:30 rglru:30" bash tools/gpu_check.sh   # benchmark only these ops, each with its limit (s)
#
# Peer kernels on a machine without internet: wheels in .whl/ are installed to /tmp/site first, e.g. made with
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#       --platform any -d .whl flash-linear-attention==0.6.0 fla-core==0.6.0 mlstm_kernels==2.0.6
#
# Limits are SIGINT first, so pytest still prints its summary. Most of a phase's time is Triton compiling every
# autotune config once per autotune key; the phases share one Triton cache. Each benchmark op gets its own time
# limit; inside it the benchmark isolates its parts (a compiler abort, seen once as an LLVM assertion inside triton
# 3.6, costs one row). Peers (fla, mlstm_kernels) are used when importable.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
O=${OUT:-results/gpu-check}
mkdir -p "$O"
S=$(date +%s)
pack() { [ -n "${TARBALL:-}" ] && tar czf "$TARBALL" --exclude='*.pt' --exclude='*.safetensors' \
    -C "$(dirname "$O")" "$(basename "$O")" 2> /dev/null; return 0; }
note() { echo "[$(($(date +%s) - S)) s] $*" | tee -a "$O/summary.log"; pack; }
if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > "$O/pip.log" 2>&1 &&
        export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
{ nvidia-smi; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"; } > "$O/env.log" 2>&1
GPU=$(python3 -c "import torch; print('H200' if 'H200' in torch.cuda.get_device_name() else 'H100')")
note "GPU $(python3 -c 'import torch; print(torch.cuda.get_device_name())')"
PYTEST=(env SEQZOO_AUTOTUNE=first SEQZOO_FAILURE_LOG="$O/failures.log" python3 -m pytest -o addopts="" -m "not slow" -v --tb=short -rfE --durations=20 -p no:cacheprovider)
# 1. whole models on the kernels against their torch paths, the dispatch's fallback, switch and autotune-hook tests
timeout -s INT -k 15 "${T_MODELS:-100}" "${PYTEST[@]}" -n "${PROCS:-14}" tests/test_kernels_models.py \
    tests/test_kernels_fallback.py tests/test_kernels_switch.py > "$O/models.log" 2>&1
note "models rc $? : $(tail -1 "$O/models.log")"
# 2. every autotune config alone, each in its own process (a config that faults, CUDA's illegal address, would
# otherwise poison the process that autotunes it): faults, and outputs against each op's float64 reference
timeout -s INT -k 10 "${T_SWEEP:-120}" python3 tools/gpu_config_sweep.py --out "$O/sweep" \
    --procs "${PROCS:-14}" > "$O/sweep.log" 2>&1
note "sweep rc $? : $(tail -1 "$O/sweep.log")"
# 3. training on the GPU: the mLSTM forward and backward on Triton (the first use of each kernel path is logged)
SEQZOO_AUTOTUNE=first timeout -s INT "${T_TRAIN:-60}" python3 -c "
import logging, sys
logging.basicConfig(level=logging.INFO, format='%(message)s')
from seqzoo.cli import main
sys.exit(main(['train', '--model', 'xlstm10-tiny', '--task', 'mqar', '--steps', '200', '--device', 'cuda',
               '--no-progress', '--out', '$O/train-xlstm10']))" > "$O/train.log" 2>&1
note "train rc $?"
# 4. every op's kernels at real shapes against the fp64 references; the peers through the benchmark's call sites
# (each peer in a child process there: mlstm_kernels 2.0.6 aborts triton 3.6's compiler, docs/benchmarks.md)
timeout -s INT -k 15 "${T_TEST:-150}" "${PYTEST[@]}" -n "${PROCS:-14}" tests/ops tests/test_kernels_peers.py \
    > "$O/tests.log" 2>&1
note "tests rc $? : $(tail -1 "$O/tests.log")"
# 5. the kernel benchmark, one op per process (autotuning compiles every config first: give T_OP=300 for numbers)
for spec in ${BENCH_OPS:-mlstm:40 gla:30 scan:10 rglru:10 conv:10 attention:10}; do
    op=${spec%%:*}
    timeout -s INT "${T_OP:-${spec##*:}}" python3 -m seqzoo.bench.kernels --device cuda --gpu "$GPU" --ops "$op" \
        --lengths "${LENGTHS:-4096,65536}" --out "$O/kernels-$op" >> "$O/kbench.log" 2>&1
    note "kernel bench $op rc $?"
done
# 6. what the real compiles used: registers, spills and shared memory of every cubin in Triton's cache
CUOBJDUMP=$(python3 -c "import os, triton; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin/cuobjdump'))")
for c in "${TRITON_CACHE_DIR:-$HOME/.triton/cache}"/*/*.cubin; do
    [ -f "$c" ] && "$CUOBJDUMP" --dump-resource-usage "$c" | grep -E "Function|REG"
done > "$O/cubin_usage.txt" 2>&1
note "done: $(grep -c Function "$O/cubin_usage.txt") cubins"
