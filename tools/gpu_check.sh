#!/bin/bash
# The GPU check of seqzoo's Triton kernels: run from the repository root on a machine with an NVIDIA GPU, torch
# and triton installed (docs/benchmarks.md, "What has run on a GPU"). Writes everything to $OUT (default
# results/gpu-check): tests.log (one line per test), train.log, kernels-<op>/ and kbench.log, summary.log.
#
#   bash tools/gpu_check.sh          # about 11 minutes: tests 300 s, training 45 s, benchmark ops 20-90 s each
#   T_TEST=600 T_TRAIN=120 T_OP=300 bash tools/gpu_check.sh      # longer limits (T_OP: every op)
#
# Peer kernels on a machine without internet: wheels in .whl/ are installed to /tmp/site first, e.g. made with
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#       --platform any -d .whl flash-linear-attention==0.6.0 fla-core==0.6.0 mlstm_kernels==2.0.6
#
# Limits are SIGINT first, so pytest still prints its summary. Each benchmark op gets its own time limit; inside
# it the benchmark isolates its parts (a compiler abort, seen once as an LLVM assertion inside triton 3.6, costs one
# row). Peers (fla, mlstm_kernels) are used when importable.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
O=${OUT:-results/gpu-check}
mkdir -p "$O"
S=$(date +%s)
note() { echo "[$(($(date +%s) - S)) s] $*" | tee -a "$O/summary.log"; }
if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > "$O/pip.log" 2>&1 &&
        export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
{ nvidia-smi; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"; } > "$O/env.log" 2>&1
GPU=$(python3 -c "import torch; print('H200' if 'H200' in torch.cuda.get_device_name() else 'H100')")
note "GPU $(python3 -c 'import torch; print(torch.cuda.get_device_name())')"
# peers run in child processes there (tests/test_kernels_peers.py): mlstm_kernels 2.0.6 aborts triton 3.6's compiler
# (docs/benchmarks.md), which fails its case with the exit status instead of taking the test worker down
timeout -s INT -k 15 "${T_TEST:-300}" python3 -m pytest -o addopts="" -m "not slow" -v --tb=short -rfE --durations=30 \
    -n "${PROCS:-14}" -p no:cacheprovider tests/test_kernels_models.py tests/ops tests/test_kernels_peers.py \
    tests/test_kernels_switch.py tests/test_kernels_fallback.py > "$O/tests.log" 2>&1
note "tests rc $? : $(tail -1 "$O/tests.log")"
timeout -s INT "${T_TRAIN:-45}" python3 -c "
import logging, sys
logging.basicConfig(level=logging.INFO, format='%(message)s')
from seqzoo.cli import main
sys.exit(main(['train', '--model', 'xlstm10-tiny', '--task', 'mqar', '--steps', '200', '--device', 'cuda',
               '--no-progress', '--out', '$O/train-xlstm10']))" > "$O/train.log" 2>&1
note "train rc $?"
for spec in mlstm:90 gla:90 scan:40 rglru:40 conv:40 attention:20; do
    op=${spec%%:*}
    timeout -s INT "${T_OP:-${spec##*:}}" python3 -m seqzoo.bench.kernels --device cuda --gpu "$GPU" --ops "$op" \
        --lengths "${LENGTHS:-4096,65536}" --out "$O/kernels-$op" >> "$O/kbench.log" 2>&1
    note "kernel bench $op rc $?"
done
