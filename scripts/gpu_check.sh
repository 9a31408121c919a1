#!/usr/bin/env bash
# One-shot check of bayesflow on a lent CUDA machine (no network, no pip index).
#
#   bash scripts/gpu_check.sh          # from the repository root, with .whl/ carried
#
# Installs the wheel bundle in .whl/ (what bayesflow needs beyond the machine's own
# packages; not in git: listed in .git/info/exclude) into /tmp/site. The bundle is built on
# a machine with a package index, for the GPU machine's Python 3.12, leaving torch out:
#   pip download --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     mlflow papermill nbconvert ipykernel jupytext latex2mathml pydantic omegaconf
#   pip download --no-deps ... -d .whl torchopt posteriors tensordict optree pyro-ppl pyro-api
# then the wheels of packages the machine already has are deleted (53 MiB were left on
# 2026-11-26; a call carries at most 64 MiB with the working tree). It then records the
# machine and runs these steps, each under its
# own timeout and all under one overall budget (BUDGET_S, default 470 s; a step that
# would start with under 15 s left is skipped):
#   gpu_tests       pytest -m gpu tests/engines/test_device.py (every engine on the device)
#   wf              the default workflow (cold_posterior) on the device, in a scratch
#                   folder with its own MLflow store and stage cache, /usr/bin/time -v
#   wf_cpu          the same workflow on the CPU, for the device/CPU ratio
#   bench:<case>    python -m benchmarks.speed.run --device <dev> --quick --cases <case>, one
#                   process per case so a timeout loses only that case (grids first:
#                   its 10,000-chain Pima SGHMC is the case a GPU is for)
# Results in $OUT (7 files, at most 2 folders deep):
#   summary.txt     a line per step (wall seconds, exit code), stage seconds, peak RSS
#   env.log         install output, nvidia-smi, python/torch versions, import check
#   workflow.log    both workflow runs (bayesflow's output and /usr/bin/time -v)
#   bench.log       gpu_tests and every benchmark case
#   benchmarks.md   the benchmark tables, case after case
#   bench/bench.json  {case: that case's results JSON}
#   report_<dev>.html the device run's report
#
# Knobs (environment): PYTHON (python3), GPU_CHECK_DEVICE (cuda), SKIP_INSTALL=1,
# OUT (/tmp/gpu_check_out when unset), BUDGET_S (470), WF_OVERRIDES ("seeds=[0]"; set
# it empty for the full two-seed default), BENCH_MODE (--quick), STEPS (the step list
# above, in this order: "gpu_tests wf wf_cpu bench:grids bench:pima bench:digits"), and
# per-step caps in seconds T_GPU_TESTS (90), T_WF (180), T_BENCH (120 a case), T_WF_CPU (120).
set -uo pipefail

START=$(date +%s)
REPO=$(pwd)
PYTHON=${PYTHON:-python3}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
OUT=${OUT:-/tmp/gpu_check_out}
BUDGET_S=${BUDGET_S:-470}
WF_OVERRIDES=${WF_OVERRIDES-seeds=[0]}
BENCH_MODE=${BENCH_MODE:---quick}
T_GPU_TESTS=${T_GPU_TESTS:-90}
T_WF=${T_WF:-180}
T_WF_CPU=${T_WF_CPU:-120}
T_BENCH=${T_BENCH:-120}
STEPS=${STEPS:-gpu_tests wf wf_cpu bench:grids bench:pima bench:digits}
SCRATCH=$(mktemp -d /tmp/gpu_check.XXXXXX)
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"

elapsed() { echo $(( $(date +%s) - START )); }

# The step's timeout: its own cap, cut to what is left of the budget (10 s kept back for
# the summary). Prints 0 when under 15 s would be left.
step_timeout() {
    local cap=$1 left
    left=$(( BUDGET_S - $(elapsed) - 10 ))
    if (( left < 15 )); then echo 0; elif (( left < cap )); then echo "$left"; else echo "$cap"; fi
}

# run_step NAME LOG CAP CMD...: CMD under timeout (its whole process group), its output
# shown and appended to $OUT/LOG, a line in the summary.
run_step() {
    local name=$1 log=$2 cap=$3; shift 3
    local t began rc wall note=""
    t=$(step_timeout "$cap")
    if [[ $t == 0 ]]; then
        echo "$name: SKIPPED (budget spent at +$(elapsed)s)" | tee -a "$SUMMARY"
        return 0
    fi
    began=$(date +%s)
    printf '\n===== %s (timeout %ss, at +%ss): %s\n' "$name" "$t" "$(elapsed)" "$*" >> "$OUT/$log"
    timeout -k 5 "$t" "$@" 2>&1 | tee -a "$OUT/$log"
    rc=${PIPESTATUS[0]}
    wall=$(( $(date +%s) - began ))
    [[ $rc == 124 || $rc == 137 ]] && note=" TIMED OUT (cap ${t}s)"
    echo "$name: wall ${wall}s exit $rc$note" | tee -a "$SUMMARY"
    echo "===== $name: wall ${wall}s exit $rc$note" >> "$OUT/$log"
    return 0
}

# ---------------------------------------------------------------- install + machine
{
    echo "date: $(date -u)   repo: $REPO   device: $DEVICE   python: $PYTHON"
    echo "steps: $STEPS   budget: ${BUDGET_S}s   overrides: '$WF_OVERRIDES'   bench: $BENCH_MODE"
} | tee "$OUT/env.log"

if [[ ${SKIP_INSTALL:-0} != 1 ]]; then
    began=$(date +%s)
    timeout 180 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl >> "$OUT/env.log" 2>&1
    rc=$?
    echo "install: wall $(( $(date +%s) - began ))s exit $rc ($(ls .whl/*.whl | wc -l) wheels)" \
        | tee -a "$SUMMARY"
    export PYTHONPATH=/tmp/site:$REPO
    # --target leaves the wheels' data files (nbconvert's templates: share/jupyter/
    # nbconvert/templates/lab) in /tmp/site/share/jupyter, where Jupyter looks only when told.
    export JUPYTER_PATH=/tmp/site/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}
else
    echo "install: skipped (SKIP_INSTALL=1)" | tee -a "$SUMMARY"
    export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
fi
export MPLBACKEND=Agg
export PYTHONDONTWRITEBYTECODE=1

{
    echo "----- nvidia-smi"
    timeout 30 nvidia-smi 2>&1 || echo "(nvidia-smi unavailable)"
    echo "----- nproc $(nproc)  $(free -g 2>/dev/null | awk '/Mem:/{print "mem " $2 " GiB"}')  load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "----- python (PYTHONPATH=$PYTHONPATH)"
    timeout 120 "$PYTHON" - <<'PYEOF' 2>&1
import importlib, sys, time, warnings
warnings.simplefilter("ignore")  # posteriors' FutureWarnings at import
print("python", sys.version.split()[0], sys.executable)
began = time.perf_counter()
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda,
      "cuda.is_available()", torch.cuda.is_available(), f"(import {time.perf_counter() - began:.1f}s)")
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "count", torch.cuda.device_count())
    x = torch.randn(1024, 1024, device="cuda")
    print("matmul sum", float((x @ x).sum()))
bad = 0
for m in ["torchopt", "posteriors", "tensordict", "optree", "pydantic", "omegaconf", "mlflow",
          "papermill", "nbconvert", "nbformat", "nbclient", "ipykernel", "jupyter_client",
          "jupytext", "latex2mathml", "seaborn", "matplotlib", "pandas", "numpy", "sklearn",
          "typer", "rich", "sqlalchemy", "alembic", "typing_extensions", "bayesflow",
          "bayesflow.cli", "bayesflow.report.render", "benchmarks.speed.run"]:
    try:
        mod = importlib.import_module(m)
        print(f"  {m:24s} {getattr(mod, '__version__', '')}  {getattr(mod, '__file__', '')}")
    except Exception as exc:
        bad += 1
        print(f"  {m:24s} IMPORT FAILED: {type(exc).__name__}: {exc}")
print("imports failed:", bad)
PYEOF
} >> "$OUT/env.log" 2>&1
echo "env: at +$(elapsed)s, $(grep -c 'IMPORT FAILED' "$OUT/env.log") import failures; $(grep -m1 '^torch ' "$OUT/env.log")" \
    | tee -a "$SUMMARY"

# ---------------------------------------------------------------- steps
TIME=()
[[ -x /usr/bin/time ]] && TIME=(/usr/bin/time -v)

# workflow_command DEV: WF_CMD, the default workflow on DEV run in a scratch folder of
# its own (fresh MLflow store and stage cache, so nothing is reused between devices).
workflow_command() {
    local dev=$1 dir=$SCRATCH/wf_$1
    mkdir -p "$dir"
    # shellcheck disable=SC2086  # WF_OVERRIDES is a list of KEY=VALUE words
    WF_CMD=(bash -c 'cd "$0" && exec "$@"' "$dir" "${TIME[@]}" "$PYTHON" -m bayesflow.cli run
        "$REPO/workflows/cold_posterior.yaml" "execution.device=$dev" $WF_OVERRIDES)
}

copy_report() {
    local dev=$1 report
    report=$(find "$SCRATCH/wf_$dev/reports" -name report.html 2>/dev/null | head -1)
    if [[ -n $report ]]; then
        cp "$report" "$OUT/report_$dev.html"
        echo "report_$dev: $(du -k "$report" | cut -f1) KiB copied" | tee -a "$SUMMARY"
    else
        echo "report_$dev: none written" | tee -a "$SUMMARY"
    fi
}

# merge_bench CASE: the case's tables appended to benchmarks.md, its JSON put in
# bench/bench.json under the case's name.
merge_bench() {
    local case=$1
    if [[ -f $SCRATCH/bench_$case.md ]]; then
        { echo; echo "<!-- case $case -->"; cat "$SCRATCH/bench_$case.md"; } >> "$OUT/benchmarks.md"
    fi
    mkdir -p "$OUT/bench"
    "$PYTHON" - "$case" "$SCRATCH/bench_$case" "$OUT/bench/bench.json" >> "$OUT/bench.log" 2>&1 <<'PYEOF'
import glob, json, os, sys
case, folder, merged = sys.argv[1:]
data = json.load(open(merged)) if os.path.exists(merged) else {}
files = sorted(glob.glob(os.path.join(folder, "*.json")))
data[case] = json.load(open(files[-1])) if files else {"missing": "no JSON written"}
with open(merged, "w") as handle:
    json.dump(data, handle, indent=1)
PYEOF
}

for step in $STEPS; do
    case $step in
        gpu_tests)
            if [[ $DEVICE != cuda ]]; then
                echo "gpu_tests: skipped (device $DEVICE)" | tee -a "$SUMMARY"; continue
            fi
            run_step gpu_tests bench.log "$T_GPU_TESTS" "$PYTHON" -m pytest -q -p no:cacheprovider \
                -m gpu tests/engines/test_device.py
            ;;
        wf)
            workflow_command "$DEVICE"
            run_step "wf_$DEVICE" workflow.log "$T_WF" "${WF_CMD[@]}"
            copy_report "$DEVICE"
            ;;
        wf_cpu)
            if [[ $DEVICE == cpu ]]; then
                echo "wf_cpu: skipped (the check runs on the CPU)" | tee -a "$SUMMARY"; continue
            fi
            workflow_command cpu
            run_step wf_cpu workflow.log "$T_WF_CPU" "${WF_CMD[@]}"
            ;;
        bench:*)
            case=${step#bench:}
            # shellcheck disable=SC2086  # BENCH_MODE is one flag or none
            run_step "bench_$case" bench.log "$T_BENCH" "$PYTHON" -m benchmarks.speed.run \
                --device "$DEVICE" $BENCH_MODE --out "$SCRATCH/bench_$case" \
                --doc "$SCRATCH/bench_$case.md" --cases "$case"
            merge_bench "$case"
            ;;
        *) echo "unknown step $step" | tee -a "$SUMMARY" ;;
    esac
done

# Stage seconds, wall time and peak memory of the workflow runs; benchmark case times.
{
    echo "details:"
    grep -E '^===== wf.*: wall|^stages:|Elapsed \(wall|Maximum resident' "$OUT/workflow.log" 2>/dev/null
    grep -E '^\[benchmarks\] .* done in|^FAILED |[0-9]+ (passed|failed|skipped|error).* in [0-9.]+s' "$OUT/bench.log" 2>/dev/null
} | sed 's/^/  /' >> "$SUMMARY"
echo "total: $(elapsed)s" | tee -a "$SUMMARY"
rm -rf "$SCRATCH"
echo "files in $OUT:"
find "$OUT" -type f | sort
exit 0
