#!/usr/bin/env bash
# One device call, prepared: the GPU kernel tests, then two training runs side by side on the GPU.
#
# Role: what a session runs on a lent GPU machine (the device tool's `run`, with `data/gpu` carried):
# 1. `tests/kernels/test_gpu.py` (every Triton kernel against its torch reference at GLM-5's
#    shapes, and the sparse MLA decode bandwidth table), bounded by KERNEL_SECONDS;
# 2. `training.gpu_run` twice at once for GPU_MINUTES of training each, sharing the GPU:
#    `scratch` (the sweep's winning recipe from random weights) and `continued` (the same recipe
#    from the shipped model's weights, at the lower peak rate that continued training needs);
# 3. into $OUT: each run's export (the model in pieces of at most 15 MiB, since the device tool
#    returns at most 8 files of 16 MiB each) and `results.tar.xz` (logs, reports, configs, curves).
# Locally: `tar -xJf results.tar.xz`, move the pieces beside each run's config, and
# `python -m training.gpu_pack --join DIR` restores `model.safetensors`.
#
# Invariant: a failing step is logged and the rest still runs; the exit status is the worst one.
# Dry run on the CPU: GPU_RUN_ARGS="--device cpu --no-compile --batch-size 1" GPU_MINUTES=0.1.
set -u
: "${OUT:?set OUT to the folder the results go to}"
MINUTES=${GPU_MINUTES:-4.5}
KERNEL_SECONDS=${KERNEL_SECONDS:-120}
EXTRA=${GPU_RUN_ARGS:-}
LOGS=/tmp/gpu-session/logs
WORK=/tmp/gpu-session/work
RESULTS=/tmp/gpu-session/out
rm -rf /tmp/gpu-session && mkdir -p "$LOGS" "$WORK" "$RESULTS" "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
worst=0
note() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOGS/session.log"; }

note "start; minutes=$MINUTES extra='$EXTRA'"
{ nvidia-smi || true; $PY -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"; } > "$LOGS/machine.txt" 2>&1
if [ "$KERNEL_SECONDS" -gt 0 ]; then
  timeout "$KERNEL_SECONDS" $PY -m pytest tests/kernels/test_gpu.py -m gpu -s -q -p no:cacheprovider > "$LOGS/kernels.log" 2>&1
  status=$?; note "kernel tests exit $status"; [ $status -gt $worst ] && worst=$status
fi

run() {  # name, then gpu_run flags
  local name=$1; shift
  timeout $(awk "BEGIN{print int($MINUTES*60)+150}") $PY -m training.gpu_run --pack data/gpu \
    --out "$RESULTS/$name" --work "$WORK/$name" --minutes "$MINUTES" --threads 4 --heldout-files 20 \
    --reference none "$@" > "$LOGS/$name.log" 2>&1
  echo $? > "$LOGS/$name.exit"
}
note "training starts"
run scratch $EXTRA &
run continued $EXTRA --lr 1e-3 --recipe --optimizer muon --muon-ns-dtype bfloat16 --indexer-every 4 \
  --mtp-stride 4 --mtp-every 4 --init-from model_runtime/default_model --dense-fraction 0 --warmup-steps 50 &
wait
for name in scratch continued; do
  status=$(cat "$LOGS/$name.exit"); note "$name exit $status"; [ "$status" -gt $worst ] && worst=$status
  cp "$WORK/$name/run/log.jsonl" "$WORK/$name/run/training.json" "$RESULTS/$name/" 2>/dev/null
  for piece in "$RESULTS/$name"/*.part[0-9]*; do
    [ -e "$piece" ] && mv "$piece" "$OUT/$name-$(basename "$piece")"
  done
done
note "done, worst exit $worst"
tar -C /tmp/gpu-session -cJf "$OUT/results.tar.xz" logs out
exit $worst
