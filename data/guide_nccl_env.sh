# The field guide's NCCL settings, verbatim (first block: "Here's the config that saved us";
# second block: "Fix: Use distributed shared memory (GPUDirect P2P)").
# Lesson 02 checks them with `labkit nccl check --env-file data/guide_nccl_env.sh`;
# lesson 02 and the checker's findings say what each line really does, with NCCL's sources.
export NCCL_IB_DISABLE=0
export NCCL_IB_HCA=mlx5_0:1,mlx5_1:1
export NCCL_SOCKET_IFNAME=eth0
export NCCL_DEBUG=INFO
export NCCL_TOPO_FILE=/etc/nccl/topo.xml
export NCCL_P2P_DISABLE=0
export NCCL_P2P_LEVEL=5  # Enables GPU-to-GPU direct transfers
