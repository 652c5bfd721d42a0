#!/usr/bin/env bash
# normlab on one CUDA GPU in one command; every figure lands in OUT_DIR.
#
#   scripts/gpu_check.sh OUT_DIR              # on a CUDA machine (OUT_DIR defaults to $OUT)
#   scripts/gpu_check.sh --only b,e OUT_DIR   # some steps (letters a-e): the rest of a cut check
#   scripts/gpu_check.sh --dry-run DIR        # every step at tiny sizes on the CPU (what CI runs)
#
# Steps, most important first, each under its own timeout and all under BUDGET seconds (default
# 540), so the whole check fits one 10-minute device call; a cut run still returns the numbers
# measured before the cut, and a step the budget cannot reach is marked SKIPPED. Sized from the
# times measured on an H200 (2026-12-04: bench gpt 152 s at 7 rounds, variants 182 s at 3, each
# train.py 35 s, 1 and 4 league runs at once 48 s and 70 s at 500 steps): about 480 s in all.
#   a. bench_gpt.json       python -m scripts.bench --device cuda --only gpt: GPT-2 small (124M,
#                           context 1024, bf16) on normlab's fastest path (torch.compile, fused
#                           AdamW, SDPA's flash kernel), normlab's GPT vs the plain GPT vs HF
#                           GPT-2: tok/s, MFU (of the card's dense bf16 peak), peak memory
#   b. sweep.json           K = 1, 2, 4, 8 league-size runs (200 steps) at once on the one card:
#                           runs per hour per card, per-run slowdown (what pack.per_gpu sets)
#   c. bench_variants.json  GPT-2 small for norm=rmsnorm, placement=deepnorm, model.qk_norm=true
#   d. train.py trainer=gpu for the default job and model=vit (logger=csv): they run, throughput
#   e. f3.json              a short GPU-size F3: d=256, depths 6 and 24, post / pre / deepnorm,
#                           all six runs at once (300 steps)
# gpu_check.md collects the tables, gpu_check.log every step's output (8 files in all).
#
# The GPU machine needs neither wandb nor datasets (logger=csv, the embedded data; text is
# tokenized without datasets when it is missing). It lacks hydra-core, omegaconf and the ANTLR
# runtime; carry these wheels (about 1 MiB; .whl/ is git-ignored, so send it along by name) in
# .whl/ and this script installs them first:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp -d .whl hydra-core==1.3.8 omegaconf==2.3.1
#   python3 -m pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3   # no wheel on PyPI
# Environment: BUDGET (seconds for the whole check, default 540), PYTHON (default: the project's
# .venv/bin/python when `make setup` made one, else python3; it must import torch), WORK (run
# dirs; default a new temp dir).
# A step that fails is marked FAILED in gpu_check.md and its file renamed NAME.failed.json: no
# table is drawn from it, so a failed step never reads as a measurement.
set -uo pipefail
cd "$(dirname "$0")/.."

dry=0
out_dir=${OUT:-}
only=a,b,c,d,e
while [ $# -gt 0 ]; do
  arg=$1
  shift
  case $arg in
    --dry-run) dry=1 ;;
    --only)
      only=${1:-}
      shift
      [[ $only =~ ^[a-e](,[a-e])*$ ]] || { echo "error: --only takes step letters a-e, e.g. --only b,e" >&2; exit 2; } ;;
    -h | --help) sed -n '2,37p' "$0"; exit 0 ;;
    -*) echo "error: unknown option $arg; use --dry-run or -h" >&2; exit 2 ;;
    *) out_dir=$arg ;;
  esac
done
if [ -z "$out_dir" ]; then
  echo "error: no output directory; pass one (scripts/gpu_check.sh OUT_DIR) or set OUT" >&2
  exit 2
fi
mkdir -p "$out_dir" && out_dir=$(cd "$out_dir" && pwd)
py=${PYTHON:-}
if [ -z "$py" ]; then
  py=python3
  [ -x .venv/bin/python ] && py=$(pwd)/.venv/bin/python
fi
work=${WORK:-$(mktemp -d -t normlab-gpu-check-XXXX)}
log=$out_dir/gpu_check.log
md=$out_dir/gpu_check.md
export WANDB_MODE=offline HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1

if ! "$py" -c "import torch" 2>/dev/null; then
  echo "error: $py cannot import torch; run make setup (it makes .venv, found by this script) or set PYTHON to a Python with torch>=2.4" >&2
  exit 2
fi

if ! "$py" -c "import hydra, omegaconf" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/normlab-site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/normlab-site${PYTHONPATH:+:$PYTHONPATH}
fi

bench_variants=()
if [ "$dry" = 1 ]; then  # tiny sizes on the CPU: the script, its arguments and its files
  bench=(--device cpu --quick)
  run=(trainer=cpu trainer.max_steps=4 trainer.val_check_interval=4 num_threads=1
    model.n_layer=1 model.n_embd=32 model.n_head=2 data.batch_size=4)
  jobs=1,2,4
  sweep=(trainer=cpu trainer.max_steps=4 num_threads=1 model.n_layer=1 model.n_embd=32
    model.n_head=2 model.block_size=32 data.batch_size=4)
  f3=(trainer=cpu trainer.max_steps=4 num_threads=1 model.n_embd=16 model.n_head=2
    model.block_size=16 data.batch_size=4 optim.warmup_steps=1)
  depths=1
  limits=(300 180 300 120 180)
  BUDGET=${BUDGET:-1200}
else
  "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
    echo "error: no CUDA device here; run scripts/gpu_check.sh --dry-run DIR on a CPU" >&2
    exit 2
  }
  bench=(--device cuda --reps 3)
  run=(trainer=gpu)
  jobs=1,2,4,8
  # The league's GPU-size run shape (conf/experiment/placements_depth_gpu.yaml) on pydocs.
  sweep=(trainer=gpu model.n_layer=6 model.n_embd=512 model.n_head=8 model.block_size=256
    data.batch_size=64 trainer.max_steps=200 trainer.val_check_interval=100 optim.warmup_steps=50)
  f3=(trainer=gpu model.n_embd=256 model.n_head=4 model.block_size=256 data.batch_size=64
    trainer.max_steps=300 optim.warmup_steps=60 optim.lr=5e-4 trainer.val_check_interval=150
    model.qk_norm=false optim.schedule=cosine)
  depths=6,24
  # Each step's limit (a, b, c, d per model, e) from the times in the header: ~90 s for a at 3
  # rounds; b's four rounds ~30-60 s each at 200 steps; c ~80 s at 1 round
  bench_variants=(--reps 1)
  limits=(130 220 110 50 110)
fi
deadline=$(($(date +%s) + ${BUDGET:-540}))

failed=0
step() {  # step NAME SECONDS FILE COMMAND...: run it under its timeout, log it, note the outcome;
  # FILE (or -) is what it writes: removed first, renamed *.failed.json when the step fails
  local name=$1 limit=$2 file=$3 began rc
  shift 3
  [ "$file" = - ] || rm -f "$file" "${file%.json}.failed.json"
  began=$(date +%s)
  local left=$((deadline - began - 5))
  if [ $left -lt 20 ]; then
    failed=1
    echo "- $name: SKIPPED, the budget is spent; run it with --only ${name%%.*}" | tee -a "$md"
    return 1
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  echo "== $name (timeout ${limit} s): $*" | tee -a "$log"
  timeout -k 20 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  local took=$(($(date +%s) - began)) why=""
  [ $rc = 124 ] && why=' (timed out)'
  if [ $rc = 0 ]; then
    echo "- $name: exit 0 after $took s" | tee -a "$md"
  else
    failed=1
    [ "$file" != - ] && [ -f "$file" ] && mv "$file" "${file%.json}.failed.json"
    echo "- $name: FAILED, exit $rc after $took s$why; no measurement recorded (see gpu_check.log)" \
      | tee -a "$md"
  fi
  return $rc
}

bench_table() {  # bench_table JSON: its rows as markdown (name, value, unit, x base)
  "$py" - "$1" >>"$md" 2>>"$log" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
print(f"\n{report['meta'].get('gpu') or report['meta'].get('cpu')}, torch {report['meta']['torch']}")
print("| name | value | unit | x base | note |\n|---|---|---|---|---|")
for r in report["results"]:
    ratio = "" if r["ratio"] is None else f"{r['ratio']:.3f}"
    value = "" if r["value"] is None else f"{r['value']:.4g}"
    print(f"| {r['name']} | {value} | {r['unit']} | {ratio} | {r['note']} |")
PY
}

: >"$log"
{
  echo "# normlab GPU check, $(date -u '+%Y-%m-%d %H:%M UTC')$([ $dry = 1 ] && echo ' (dry run, CPU)')"
  "$py" -c "import torch; print('torch', torch.__version__, '|', torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')"
  echo
} >"$md" 2>>"$log"

want() { [[ ,$only, == *,$1,* ]]; }

bench_step() {  # bench_step LETTER PART LIMIT [ARGS...]: scripts.bench --only PART, its table
  local letter=$1 part=$2 limit=$3 file=$out_dir/bench_$2.json
  shift 3
  step "$letter. bench $part" "$limit" "$file" "$py" -m scripts.bench "${bench[@]}" "$@" \
    --only "$part" --out "$file" && bench_table "$file"
}

concurrent_step() {  # concurrent_step NAME LIMIT FILE ARGS...: scripts.bench.concurrent, its table
  local name=$1 limit=$2 file=$3
  shift 3
  step "$name" "$limit" "$file" "$py" -m scripts.bench.concurrent --out "$file" "$@" && "$py" -c "
import json, sys
from scripts.bench.concurrent import markdown
print(markdown(json.load(open(sys.argv[1]))))" "$file" >>"$md"
}

want a && bench_step a gpt "${limits[0]}"

want b && concurrent_step "b. runs per card" "${limits[1]}" "$out_dir/sweep.json" \
  --jobs "$jobs" --work "$work/sweep" -- logger=csv "${sweep[@]}"

want c && bench_step c variants "${limits[2]}" "${bench_variants[@]}"

want d && for model in gpt vit; do
  step "d. train.py model=$model" "${limits[3]}" - "$py" train.py "model=$model" "${run[@]}" \
    logger=csv "hydra.run.dir=$work/$model" && "$py" -c "import json,sys; s=json.load(open(sys.argv[1])); print('  ', {k: s.get(k) for k in ('status','steps','final_val_loss','final_val_acc','tokens_per_s','samples_per_s','wall_s')})" \
      "$work/$model/summary.json" >>"$md"
done

want e && concurrent_step "e. short F3" "${limits[4]}" "$out_dir/f3.json" \
  --grid placement=post,pre,deepnorm --grid "model.n_layer=$depths" --work "$work/f3" \
  -- logger=csv "${f3[@]}"

echo "done: $out_dir (gpu_check.md, gpu_check.log, bench_*.json, sweep.json, f3.json)"
exit $failed
