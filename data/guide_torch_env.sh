# The field guide's launch environment (Step 1: "On every node, set these environment
# variables"), verbatim, then two settings the guide gives in prose, written as exports:
# "Fix: Set NCCL_BLOCKING_WAIT=1 in your environment" (Debugging) and "Set NCCL_ALGO=Ring for
# clusters with more than 8 GPUs" (What I'd Do Differently). Lesson 02 checks them with
# `labkit nccl check --env-file data/guide_torch_env.sh`.
export MASTER_ADDR="10.0.0.1"  # IP of the first node
export MASTER_PORT="29500"      # Any unused port
export WORLD_SIZE=8             # Total GPUs across all nodes
export RANK=$NODE_RANK          # 0 for master, 1, 2, ... for workers
export LOCAL_WORLD_SIZE=4       # GPUs per node
export NCCL_BLOCKING_WAIT=1
export NCCL_ALGO=Ring
