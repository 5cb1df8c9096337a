"""How a job runs (lesson 01, and under every other lesson): ranks, launches, processes.

- ``dist``: what a rank knows about itself (``RankInfo``) and how it joins the process group.
- ``launch``: ``torchrun`` on simulated nodes on this machine, or on real hosts; ``Fleet``
  events (a node that starts late, is preempted, killed or frozen).
- ``rank_script``: how a driver finds the script its ranks run (``topic/X.py`` beside
  ``topic/X_rank.py``).
- ``cluster``: hosts from a hostfile or Slurm; ``worker``: what a rank runs inside torchrun.
- ``publish``: what rank 0 hands back to the notebook, as JSON.
- ``proctree``, ``ports``, ``runlog``, ``pace``, ``stats``: process trees, free ports, JSON-lines
  logs, the speed of this machine (measured, for limits that hold on any machine), percentiles.
- ``netlab``: network namespaces as simulated hosts; ``magic``: the ``%%torchrun`` cell magic.
- ``warm`` (with ``warm_rank``, ``warm_channel``, ``warm_cell``, ``warm_bench``): warm ranks,
  a job whose ranks stay up and run ``%%torchrun`` cells (``%torchrun_start``).

In a ``%%torchrun`` cell or a rank script::

    from labkit.runtime import dist, publish
    info = dist.setup()          # joins the group torchrun set up
    publish({"world": info.world_size})
"""

from __future__ import annotations

from labkit.runtime.publish import publish

__all__ = ["publish"]
