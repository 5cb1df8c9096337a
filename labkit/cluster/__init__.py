"""Real clusters: the same torchrun job started on real hosts over ssh, or under Slurm.

``ssh`` writes one torchrun command per host and runs them all at once (``launch_hosts``),
ending every remote process on any exit; ``slurm`` writes an sbatch script whose ``srun``
starts one agent per node. ``cli`` is the ``labkit launch`` command for both and for
simulated nodes on this machine.
"""

from labkit.cluster.slurm import slurm_script
from labkit.cluster.ssh import launch_hosts, ssh_commands

__all__ = ["launch_hosts", "slurm_script", "ssh_commands"]
