"""Groups of runs by name: each submission over seeds or devices gets one named from what it is ("tiny-holmes,
seeds 1337-1339"), a group made by hand (``PATCH /api/runs/{id}`` with a ``group_id``) is named by its id, and
any group can be renamed (``PATCH /api/groups/{id}``). Grouping itself (the spread, the verdict): compare.py."""

from __future__ import annotations

from collections.abc import Iterable

from sqlmodel import Session, col, select

from ..db import saved_changes
from ..errors import NotFound
from ..models import Run, RunGroup, RunGroupPublic, RunGroupUpdate
from ..models.groups import GROUP_NAME_MAX


def seeds_text(seeds: list[int]) -> str:
    """A submission's seeds in few words.

    >>> seeds_text([1337, 1338, 1339]), seeds_text([1, 5]), seeds_text([7])
    ('seeds 1337-1339', 'seeds 1, 5', 'seed 7')
    """
    seeds = sorted(set(seeds))
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return "seeds " + ", ".join(map(str, seeds))


def group_name(base: str, devices: list[str], seeds: list[int]) -> str:
    """What a submission's group is, from its name, devices and seeds.

    >>> group_name("tiny-holmes", ["cpu"], [1337, 1338, 1339])
    'tiny-holmes, seeds 1337-1339'
    >>> group_name("holmes-holmes", ["cpu", "cuda"], [1337])
    'holmes-holmes on cpu and cuda, seed 1337'
    """
    devices = list(dict.fromkeys(devices))
    on = "" if len(devices) < 2 else " on " + ", ".join(devices[:-1]) + f" and {devices[-1]}"
    return f"{base}{on}, {seeds_text(seeds)}"[:GROUP_NAME_MAX]


def runs_group_name(base: str, runs: list[Run]) -> str:
    return group_name(base, [r.requested_device for r in runs], [int(r.config.get("seed", 0)) for r in runs])


def group_runs(session: Session, *, group_id: str) -> list[Run]:
    """The runs of one group (one submission over devices or seeds, and their repeats), oldest first."""
    return list(session.exec(select(Run).where(Run.group_id == group_id).order_by(col(Run.id))))


def get_group(session: Session, *, group_id: str) -> RunGroup:
    group = session.get(RunGroup, group_id)
    if group is None:
        raise NotFound(f"group {group_id!r} does not exist")
    return group


def add_group(session: Session, *, group_id: str, name: str) -> RunGroup:
    """The group ``group_id``, added with ``name`` when it is new (uncommitted: the caller commits)."""
    group = session.get(RunGroup, group_id)
    if group is None:
        group = RunGroup(id=group_id, name=name)
        session.add(group)
    return group


def named_group(session: Session, *, name: str) -> RunGroup:
    """The oldest group called ``name``, or a new one numbered after the numbered ones (the ids MLflow's clients
    know experiments by), for a client that names its group (a W&B project); uncommitted."""
    group = session.exec(select(RunGroup).where(RunGroup.name == name).order_by(col(RunGroup.created_at))).first()
    return group or add_group(session, group_id=next_group_number(session), name=name)


def next_group_number(session: Session) -> str:
    numbered = [int(i) for i in session.exec(select(RunGroup.id)).all() if i.isdigit()]
    return str(max(numbered, default=0) + 1)


def record_submission(session: Session, *, group_id: str, base: str, new: list[Run]) -> RunGroup:
    """A submission's group: named from its runs when it is new; when ``new`` joins a group whose name is still
    the one it was given ("Run 2 more seeds"), the name follows ("seeds 1337-1339" becomes "seeds 1337-1341")."""
    group = session.get(RunGroup, group_id)
    if group is None:
        return add_group(session, group_id=group_id, name=runs_group_name(base, new))
    session.flush()
    members = group_runs(session, group_id=group_id)
    new_ids = {r.id for r in new}  # flushed: numbered
    before = [r for r in members if r.id not in new_ids]
    if before and group.name == runs_group_name(base, before):
        group.name = runs_group_name(base, members)
        session.add(group)
    return group


def group_names(session: Session, *, group_ids: Iterable[str | None]) -> dict[str, str]:
    """Each group's name by its id (the ids of runs with no group left out)."""
    ids = sorted({g for g in group_ids if g})
    if not ids:
        return {}
    return dict(session.exec(select(RunGroup.id, RunGroup.name).where(col(RunGroup.id).in_(ids))).all())


def group_public(session: Session, *, group_id: str) -> RunGroupPublic:
    group = get_group(session, group_id=group_id)
    return RunGroupPublic(id=group.id, name=group.name, created_at=group.created_at,
                          run_ids=[r.id for r in group_runs(session, group_id=group_id)])


def rename_group(session: Session, *, group_id: str, body: RunGroupUpdate) -> RunGroupPublic:
    saved_changes(session, get_group(session, group_id=group_id), body)
    return group_public(session, group_id=group_id)
