#!/bin/bash
# The GPU check of seqzoo's Triton kernels: run from the repository root on a machine with an NVIDIA GPU, torch
# and triton installed (docs/benchmarks.md, "What has run on a GPU"). Writes everything to $OUT (default
# results/gpu-check): tests.log (one line per test), train.log, kernels-<op>/ and kbench.log, summary.log.
#
#   bash tools/gpu_check.sh                       # tests 600 s, training 120 s, each benchmark op 300 s
#   T_TEST=190 T_TRAIN=25 T_OP=80 bash tools/gpu_check.sh
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
{ nvidia-smi; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"; } > "$O/env.log" 2>&1
GPU=$(python3 -c "import torch; print('H200' if 'H200' in torch.cuda.get_device_name() else 'H100')")
note "GPU $(python3 -c 'import torch; print(torch.cuda.get_device_name())')"
timeout -s INT -k 15 "${T_TEST:-600}" python3 -m pytest -o addopts="" -m "not slow" -v --tb=short -rfE --durations=30 \
    -n "${PROCS:-8}" -p no:cacheprovider tests/test_kernels_models.py tests/ops tests/test_kernels_peers.py \
    tests/test_kernels_switch.py tests/test_kernels_fallback.py > "$O/tests.log" 2>&1
note "tests rc $? : $(tail -1 "$O/tests.log")"
timeout -s INT "${T_TRAIN:-120}" python3 -c "
import logging, sys
logging.basicConfig(level=logging.INFO, format='%(message)s')
from seqzoo.cli import main
sys.exit(main(['train', '--model', 'xlstm10-tiny', '--task', 'mqar', '--steps', '200', '--device', 'cuda',
               '--no-progress', '--out', '$O/train-xlstm10']))" > "$O/train.log" 2>&1
note "train rc $?"
for op in mlstm gla attention scan rglru conv; do
    timeout -s INT "${T_OP:-300}" python3 -m seqzoo.bench.kernels --device cuda --gpu "$GPU" --ops "$op" \
        --lengths "${LENGTHS:-4096,65536}" --out "$O/kernels-$op" >> "$O/kbench.log" 2>&1
    note "kernel bench $op rc $?"
done
