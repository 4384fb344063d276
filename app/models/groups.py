"""Groups of runs: one submission over seeds or devices (and its repeats), or runs put together by hand
(``PATCH /api/runs/{id}`` with a ``group_id``). A group has a name people read ("tiny-holmes, seeds 1337-1339"),
shown wherever the group is: the compare page's legend, groups table and sentence, the run page, the export."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from .common import InputModel, utcnow

GROUP_ID_MAX = 50
GROUP_NAME_MAX = 200


class RunGroupBase(SQLModel):
    name: str = Field(min_length=1, max_length=GROUP_NAME_MAX, description="what the group is, as people read it")


class RunGroupUpdate(InputModel):
    """PATCH /api/groups/{id}: a new name."""

    name: str = Field(min_length=1, max_length=GROUP_NAME_MAX, description="what the group is, as people read it")


class RunGroup(RunGroupBase, table=True):
    __tablename__ = "run_groups"

    id: str = Field(primary_key=True, max_length=GROUP_ID_MAX)  # runs.group_id
    created_at: datetime = Field(default_factory=utcnow)


class RunGroupPublic(RunGroupBase):
    id: str
    created_at: datetime
    run_ids: list[int] = Field(description="its runs, oldest first")
