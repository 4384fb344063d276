"""This process's place among the ranks torchrun started (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), read without
torch: the command line decides what only rank 0 does (reporting to a dashboard) before it imports torch, so that
a bad address fails at once. The training side of several ranks: :mod:`tinygpt.distributed`.

>>> DistInfo(rank=1, world_size=2).is_main
False
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def dist_info() -> DistInfo:
    """This process's place among the ranks (one rank of one when not launched by torchrun)."""
    return DistInfo(
        rank=int(os.environ.get("RANK", 0)),
        world_size=int(os.environ.get("WORLD_SIZE", 1)),
        local_rank=int(os.environ.get("LOCAL_RANK", 0)),
    )
