#!/usr/bin/env bash
# ampcheck record on jobs a launcher starts: torchrun (and python -m torch.distributed.run),
# accelerate launch and paddle.distributed.launch, on the CPU with gloo, 2 and 4 ranks.
# Every worker rank is recorded (not the launcher), a report per rank and one job report;
# the planted faults of recorder/tests/scripts/{ddp,fsdp}_train.py are named at their first
# step with their ranks (expectations written from the planting, in the scripts' comments):
#   skip_alone     rank 1's own shard overflows at step 3, found_inf not reduced: rank 1
#                  skips the update the others apply, and the replicas diverge there
#   late_param     fc2.gain, added after DDP(model): not all-reduced, the replicas differ
#                  after step 1 and the gain first, its gradient already differing
#   tp_bf16        a tensor-parallel all_reduce in bf16 in the backward of ReduceGradient
#                  in 'tp', where MixedPrecisionPolicy(reduce_dtype=float32) was asked
# and the healthy runs (plain DDP, a bf16 comm hook, FSDP2, ShardedGradScaler) are not failed.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/expect.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/record.sh"
work=${WORK:?set WORK to a scratch directory}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../recorder/tests/scripts" && pwd)
run=("$py" -m torch.distributed.run --nproc_per_node)
torchrun=$(dirname "$py")/torchrun

# Healthy DDP, under torchrun itself: each rank's report beside the job's, the launcher none.
expect 0 "2 ranks in agreement (4 replicated parameter(s) identical at every step)" -- \
  "$bin" record --quiet --report "$work/ddp.json" -- "$torchrun" --nproc_per_node 2 "$scripts/ddp_train.py"
for f in ddp.json ddp.rank0.json ddp.rank1.json; do validate "$work/$f"; done
[[ $(json_get "$work/ddp.json" 'r["distributed"]["world_size"], r["distributed"]["runtime"]') == "(2, 'torchrun (gloo)')" ]] ||
  fail "the job report should hold the 2 ranks' consensus under torchrun (gloo)"
[[ $(json_get "$work/ddp.rank1.json" 'r["rank"]["rank"], r["run"]["level"], len(r["steps"])') == "(1, 'O1', 6)" ]] ||
  fail "rank 1's own report: its rank, autocast's O1 and its 6 steps"
[[ $(json_get "$work/ddp.rank0.json" '{(c["op"], c["dtype"], c["phase"]) for c in r["rank"]["collectives"] if c["phase"] == "backward"}') == "{('all_reduce', 'float32', 'backward')}" ]] ||
  fail "DDP's gradient all-reduces: float32, in backward"
[[ ! -e $work/ddp.rank2.json ]] || fail "a rank too many"
# DDP's gradient buckets are as_strided views of uninitialized memory: a view computes
# nothing, so their garbage is no tensor's non-finite values in a run that made none.
[[ $(json_get "$work/ddp.rank0.json" 'sum(n["numerics"][k] for o in r["ops"] for n in o["numerics"] for k in ("nan", "pos_inf", "neg_inf"))') == "0" ]] ||
  fail "a healthy DDP run's tensors hold no non-finite values (DDP's bucket views are not values)"

# 4 ranks: rank 1 skips alone at step 3.
expect 1 "ranks disagreed at step 3: rank 1 skipped the update that ranks 0, 2, 3 applied" -- \
  "$bin" record --quiet --report "$work/skip.json" -- "${run[@]}" 4 "$scripts/ddp_train.py" --fault skip_alone
[[ $(json_get "$work/skip.json" '[(d["step"], d["skipped"], d["applied"]) for d in r["distributed"]["disagreements"]]') == "[(3, [1], [0, 2, 3])]" ]] ||
  fail "skip_alone: the one disagreement is step 3, rank 1 against ranks 0, 2, 3"
[[ $(json_get "$work/skip.json" 'r["distributed"]["first_divergence"], r["distributed"]["compared_params"], r["distributed"]["sharded_params"]') == "(3, 4, 2)" ]] ||
  fail "skip_alone: the replicas diverge from step 3; 4 replicas compared, the shard's 2 parameters not"
expect 0 "found_inf was not reduced over the ranks" -- "$bin" report "$work/skip.json" --text

# A parameter outside DDP's buckets, on 2 and 4 ranks.
for n in 2 4; do
  expect 1 "the replicas' parameters differ after step 1" -- \
    "$bin" record --quiet --report "$work/late$n.json" -- "${run[@]}" $n "$scripts/ddp_train.py" --fault late_param
  [[ $(json_get "$work/late$n.json" '"fc2.gain first: its gradient already differed after the reduction" in r["summary"]["verdict_text"]') == True ]] ||
    fail "late_param on $n ranks: fc2.gain named first, its gradient differing after the reduction"
done

# Gradients reduced in bf16 by a comm hook, as asked: said, not failed.
expect 0 "DDP reduces the gradients with the comm hook bf16_compress_hook: in bfloat16, as asked" -- \
  "$bin" record --quiet -- "${run[@]}" 2 "$scripts/ddp_train.py" --fault compress_hook

# FSDP2: its shards are not compared, its bf16 all-gathers and fp32 reduce-scatters as asked.
expect 0 "2 ranks in agreement (their parameters are shards" -- \
  "$bin" record --quiet --report "$work/fsdp.json" -- "${run[@]}" 2 "$scripts/fsdp_train.py"
[[ $(json_get "$work/fsdp.json" 'sorted({(c["op"], c["dtype"]) for c in r["distributed"]["collectives"]})') == "[('all_gather', 'bfloat16'), ('reduce_scatter', 'float32')]" ]] ||
  fail "FSDP2: all_gather in bf16 (param_dtype), reduce_scatter in fp32 (reduce_dtype)"
[[ $(json_get "$work/fsdp.rank0.json" '[(a["api"], a["param_dtype"], a["reduce_dtype"]) for a in r["rank"]["asked"]]') == "[('fully_shard', 'bfloat16', 'float32')]" ]] ||
  fail "FSDP2: the MixedPrecisionPolicy asked"
expect 1 "gradients reduced in bfloat16 where float32 was asked" -- \
  "$bin" record --quiet --report "$work/tp.json" -- "${run[@]}" 2 "$scripts/fsdp_train.py" --fault tp_bf16
[[ $(json_get "$work/tp.json" '[(f["kind"], f["failure"], f["step"], f["ranks"]) for f in r["distributed"]["findings"]]') == "[('reduce_dtype', True, 1, [0, 1])]" ]] ||
  fail "tp_bf16: one finding, the bf16 reduction, at step 1 on both ranks"
[[ $(json_get "$work/tp.json" '"autograd.Function ReduceGradient in '"'"'tp'"'"'" in r["summary"]["verdict_text"]') == True ]] ||
  fail "tp_bf16: the reduction named by its Function and module"
expect 0 "found_inf reduced over the ranks before each skip decision" -- \
  "$bin" record --quiet -- "${run[@]}" 2 "$scripts/fsdp_train.py" --fault sharded_scaler

# accelerate launch, 2 processes on the CPU; Paddle's launcher.
accelerate=$(dirname "$py")/accelerate
if [[ -x $accelerate ]]; then
  expect 0 "Data parallel: 2 ranks (accelerate launch (gloo))" -- \
    "$bin" record --quiet -- "$accelerate" launch --multi_gpu --num_processes 2 --num_machines 1 \
      --mixed_precision bf16 --dynamo_backend no "$scripts/accelerate_train.py"
else
  fail "accelerate is not installed in $py's environment (scripts/pyenv.sh installs it)"
fi
expect 0 "Data parallel: 2 ranks (paddle.distributed.launch" -- \
  "$bin" record --quiet -- "$py" -m paddle.distributed.launch --log_dir "$work/paddle-log" --nproc_per_node 2 \
    "$scripts/paddle_dp_train.py"

echo "record_ranks: $fails failure(s)"
exit $((fails > 0))
