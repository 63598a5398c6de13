#!/bin/bash
# The GPU scoreboard (docs/benchmarks.md, "Scoreboard"): the first thing to run on a machine with a GPU, from the
# repository root. Installs the peer wheels in .whl/ when there are any, runs `seqzoo kernels scoreboard` under a hard
# time limit and copies the result file, its docs table (table.md) and the log to $OUT (default
# results/gpu-scoreboard), so that a device tool returning $OUT brings them back. The scoreboard writes its file after
# every part, so a run stopped at the limit still leaves one. The peers' wheels (no internet on a device), e.g.:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#       --platform any -d .whl flash-linear-attention==0.6.0 fla-core==0.6.0 mlstm_kernels==2.0.6 xlstm==2.0.6
#
#   bash tools/gpu_scoreboard.sh                         # about 7.5 minutes (LIMIT=480 s hard, TIME_LIMIT=440 s)
#   COMMIT=<sha> bash tools/gpu_scoreboard.sh            # the commit measured, where the copy has no .git
#   bash tools/gpu_scoreboard.sh --parts mlstm,mlstm_peer  # extra arguments go to the scoreboard
#
# Then, where the repository lives: commit benchmarks/gpu/<date>-<gpu>.json and run
#   seqzoo kernels scoreboard --update-docs docs/benchmarks.md
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
O=${OUT:-results/gpu-scoreboard}
DEST=${SCOREBOARD_DIR:-benchmarks/gpu}
mkdir -p "$O" "$DEST"
if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > "$O/pip.log" 2>&1 &&
        export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
COMMIT=${COMMIT:-$(git rev-parse HEAD 2> /dev/null || echo unknown)}
stamp=$(mktemp)
# SIGINT first: the scoreboard stops between parts' writes; -k kills it 10 s later if it does not
timeout -s INT -k 10 "${LIMIT:-480}" python3 -m seqzoo kernels scoreboard --out "$DEST" \
    --time-limit "${TIME_LIMIT:-440}" --commit "$COMMIT" "$@" > "$O/scoreboard.log" 2>&1
rc=$?
tail -25 "$O/scoreboard.log"
find "$DEST" -maxdepth 1 -name '*.json' -newer "$stamp" -exec cp {} "$O/" \; # the files this run wrote
python3 -m seqzoo kernels scoreboard --out "$DEST" --table > "$O/table.md" 2>&1
rm -f "$stamp"
echo "scoreboard rc $rc; result files in $O: $(cd "$O" && ls ./*.json 2> /dev/null | tr '\n' ' ')"
exit $rc
