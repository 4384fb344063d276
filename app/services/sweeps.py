"""Sweeps: a W&B-style search over run options, on Optuna (``app/services/study.py``); its trials are runs.

``settle_sweep`` is the one place a sweep moves on: it tells the study the result of every trial
that has ended, queues trials up to ``parallel`` (until ``run_cap`` or the grid is spent), keeps the
best checkpoints of the top trials only, and ends the sweep when nothing is left. It is idempotent,
takes the sweep's row lock, and is called wherever a trial may have ended (the job, the worker, a
cancel) and once when the sweep is created.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from sqlalchemy import update
from sqlmodel import Session, col, select

from tinygpt.options import Option, did_you_mean

from ..db import saved_changes
from ..errors import Conflict, Invalid, NotFound, invalid_from
from ..models import (
    TRAINING_OPTIONS,
    Alert,
    EventType,
    Metric,
    Run,
    RunCreate,
    RunStatus,
    Sweep,
    SweepCreate,
    SweepDetail,
    SweepPublic,
    SweepStatus,
    SweepUpdate,
    TrialPublic,
    utcnow,
)
from ..models.sweep_distributions import DISTRIBUTIONS, filled, gives_whole_numbers, ppf, quantile_range
from ..redaction import shown_config
from ..settings import Settings
from . import study as studies
from .alerts import raise_alert
from .datasets import dataset_target
from .events import record_event
from .files import remove_file, run_disk_bytes
from .head_scores import induction_figures
from .lifecycle import add_runs, cancel_run, check_run
from .runs import delete_run

TRIAL_STATES = {RunStatus.succeeded: "COMPLETE", RunStatus.pruned: "PRUNED"}  # any other end: FAIL
ACTIVE = (RunStatus.queued, RunStatus.running)


# -- checking a sweep config -------------------------------------------------------------------------
def base_options(body: SweepCreate) -> RunCreate:
    """The run options every trial starts from, checked like a run's (422 naming ``base.FIELD``)."""
    try:
        base = RunCreate.model_validate(body.base)
    except ValidationError as exc:
        raise invalid_from(exc, under="base") from None
    if not isinstance(base.device, str):
        raise Invalid("a sweep's trials run on one device: start one sweep per device", field="base.device")
    if base.seeds is not None:
        raise Invalid("a sweep repeats each trial over seeds with its own key, seeds (at the top, beside parallel), "
                      "not base's", field="base.seeds")
    return base


def check_value(base: RunCreate, name: str, value: Any, what: str) -> None:
    try:
        RunCreate.model_validate({**base.model_dump(), name: value})
    except ValidationError as exc:
        msg = next((e["msg"] for e in exc.errors() if e["loc"] and e["loc"][0] == name), exc.errors()[0]["msg"])
        raise Invalid(f"{what} {value!r}: {msg.removeprefix('Value error, ')}", field=f"parameters.{name}") from None


def check_parameter(base: RunCreate, name: str, p: dict, method: str) -> None:
    """A parameter is a run option of the declaration, and every value it can take is inside its bounds."""
    option: Option | None = TRAINING_OPTIONS.get(name)
    if option is None:
        guess = did_you_mean(name, TRAINING_OPTIONS)
        raise Invalid(f"{name!r} is not a run option ({f'did you mean {guess!r}? ' if guess else ''}GET /api/options "
                      "lists them)", field=f"parameters.{name}")
    if p.get("value") is not None:
        return check_value(base, name, p["value"], "value")
    if p.get("values") is not None:
        if method == "grid" and p.get("probabilities") is not None:
            raise Invalid("a grid sweep tries every value once: probabilities have no meaning there (W&B refuses "
                          "them too)", field=f"parameters.{name}")
        for value in p["values"]:
            check_value(base, name, value, "value")
        return None
    p = filled(p)
    if method == "grid":
        return check_grid_parameter(base, name, p)
    if option.kind not in (int, float):
        raise Invalid(f"{name} is not a number: give values, not a distribution", field=f"parameters.{name}")
    if option.kind is int and not gives_whole_numbers(p):
        raise Invalid(f"{name} takes whole numbers: use int_uniform, values, or a q_ distribution with a whole q",
                      field=f"parameters.{name}")
    low, high = (p["min"], p["max"]) if DISTRIBUTIONS[p["distribution"]].native else (
        ppf(p, u) for u in quantile_range(p))
    check_value(base, name, low, "min" if "min" in p else "lowest value")
    check_value(base, name, high, "max" if "max" in p else "highest value")
    return None


def check_grid_parameter(base: RunCreate, name: str, p: dict) -> None:
    size = studies.grid_size(p)
    if size is None:
        raise Invalid(f"a grid sweep takes values, int_uniform or q_uniform (as W&B's grid does), not "
                      f"{p['distribution']}", field=f"parameters.{name}")
    if size > studies.MAX_GRID_POINTS:
        raise Invalid(f"{p['distribution']} from {p['min']} to {p['max']} is {size} points, more than a grid's "
                      f"{studies.MAX_GRID_POINTS}: give values, or a random or bayes sweep", field=f"parameters.{name}")
    for point in studies.grid_values(p):
        check_value(base, name, point, "value")


def check_sweep(body: SweepCreate) -> RunCreate:
    base = base_options(body)
    for name, p in body.parameters.items():
        check_parameter(base, name, p.model_dump(exclude_none=True), body.method)
    if body.method != "grid" and body.run_cap is None:
        raise Invalid(f"run_cap is required for a {body.method} sweep (it would never end)", field="run_cap")
    evaluations = studies.evaluations(base.model_dump())
    if body.early_terminate is not None and body.early_terminate.min_iter > evaluations:
        raise Invalid(f"min_iter {body.early_terminate.min_iter} is more than a trial's {evaluations} evaluation(s) "
                      f"(steps / eval_every)", field="early_terminate.min_iter")
    if studies.trials_planned(sweep_config(body)) > studies.MAX_GRID_POINTS:
        raise Invalid("the grid has more than 1000 points: give run_cap, or fewer values", field="parameters")
    if body.method == "grid" and studies.grid_points(sweep_config(body)) > studies.MAX_GRID_LISTED:
        raise Invalid(f"the grid has {studies.grid_points(sweep_config(body)):,} points, more than the "
                      f"{studies.MAX_GRID_LISTED:,} a grid sampler lists: give fewer values", field="parameters")
    return base


def sweep_config(body: SweepCreate) -> dict:
    """What a sweep stores: the config as validated, each parameter with only the keys it has (its distribution
    named and W&B's defaults written in)."""
    parameters = {name: p.model_dump(mode="json", exclude_none=True) for name, p in body.parameters.items()}
    return {**body.model_dump(mode="json", exclude={"name", "tags", "parameters"}), "parameters": parameters}


class NoAliasLoader(yaml.SafeLoader):
    """YAML's safe subset less aliases (``*name``): each alias repeats a whole node, and nested ones
    multiply, so 400 bytes could stand for gigabytes once expanded. Refused where the parser meets them,
    before anything is built."""

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted: write the value out",
                                              mark)
        return super().compose_node(parent, index)


def load_yaml(text: str) -> Any:
    """YAML (or JSON) text as data, without aliases (:class:`NoAliasLoader`); yaml.YAMLError otherwise."""
    return yaml.load(text, Loader=NoAliasLoader)  # noqa: S506 (a SafeLoader)


def parse_sweep_text(text: str) -> SweepCreate:
    """A sweep config written as YAML (or JSON, which YAML reads too), e.g. a W&B ``sweep.yaml``."""
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise Invalid(f"not valid YAML{line}: {getattr(exc, 'problem', None) or exc}", field="config") from None
    if not isinstance(data, dict):
        raise Invalid("a sweep config is a mapping (method, parameters, ...)", field="config")
    try:
        return SweepCreate.model_validate(data)
    except ValidationError as exc:
        raise invalid_from(exc) from None


# -- creating, settling, cancelling, deleting --------------------------------------------------------
def create_sweep(session: Session, *, body: SweepCreate, settings: Settings) -> Sweep:
    base = check_sweep(body)
    check_run(session, body=base, settings=settings)
    if body.metric.name == "time_to_target" and dataset_target(session, name=base.dataset,
                                                                configured=base.target_val_loss) is None:
        raise Invalid(f"metric time_to_target needs a target: set target_val_loss in base (dataset "
                      f"{base.dataset!r} has no known one)", field="metric")
    if body.metric.name == "induction_step" and (base.head_scores is False or "head_scores" in body.parameters):
        raise Invalid("metric induction_step needs the heads' scores recorded: leave head_scores on, unswept",
                      field="metric")
    config = sweep_config(body)
    # the options given (checked), not their defaults: a trial's own recipe (a swept ``recipe``) fills the rest
    config["base"] = base.model_dump(mode="json", exclude_unset=True, exclude={"name", "tags"})
    sweep = Sweep(name=body.name or f"{body.method} sweep of {', '.join(body.parameters)}", config=config,
                  tags=body.tags, trials_planned=studies.trials_planned(config), notes=body.description or "")
    session.add(sweep)
    session.flush()
    studies.create(settings, sweep.id)  # before the sweep is seen running: a worker settles what it sees
    session.commit()
    session.refresh(sweep)
    settle_sweep(session, sweep_id=sweep.id, settings=settings)
    session.refresh(sweep)
    return sweep


def update_sweep(session: Session, *, sweep_id: int, body: SweepUpdate) -> Sweep:
    return saved_changes(session, get_sweep(session, sweep_id=sweep_id), body)


def lock_sweep(session: Session, sweep_id: int) -> Sweep:
    """The sweep's row, locked until the transaction ends (a write: SQLite's lock, PostgreSQL's row lock),
    so two processes settling it at once cannot both add the last trial."""
    session.exec(update(Sweep).where(col(Sweep.id) == sweep_id).values(filled_at=utcnow()))
    sweep = session.get(Sweep, sweep_id, populate_existing=True)
    if sweep is None:
        raise NotFound(f"sweep {sweep_id} does not exist")
    return sweep


def trials_of(session: Session, sweep_id: int) -> list[Run]:
    return list(session.exec(select(Run).where(Run.sweep_id == sweep_id).order_by(col(Run.trial), col(Run.id))))


def settle_sweep(session: Session, *, sweep_id: int, settings: Settings) -> None:
    sweep = lock_sweep(session, sweep_id)
    trials = trials_of(session, sweep_id)
    study = studies.load(settings, sweep_id, sweep.config)
    runs_of = by_trial(trials)
    for runs in runs_of.values():
        tell_result(session, study, runs, sweep.config["metric"]["name"])
    active = sum(1 for runs in runs_of.values() if any(r.status in ACTIVE for r in runs))
    count = len(runs_of)
    if sweep.status == SweepStatus.running:
        reached = target_reached_by(session, sweep, trials)
        planned = count if reached else sweep.trials_planned  # a reached target: no more trials
        if active < sweep.config["parallel"] and count < planned:
            asking = studies.load(settings, sweep_id, sweep.config, to_ask=True)
        while active < sweep.config["parallel"] and count < planned:
            trials.extend(add_trial(session, sweep, asking, settings))
            active, count = active + 1, count + 1
        if active == 0 and count >= planned:
            # the alert first: the sweep's stream ends at its status event
            found = f"; target {sweep.config['metric']['target']:g} reached by trial {reached.trial}" if reached else ""
            raise_alert(session, kind=Alert.sweep_finished, message=sweep_summary(trials) + found, settings=settings,
                        sweep=sweep)
            end_sweep(session, sweep, SweepStatus.finished)
    keep_top_checkpoints(session, sweep, trials)
    session.commit()


def target_reached_by(session: Session, sweep: Sweep, trials: list[Run]) -> Run | None:
    """The first run of the first finished trial whose objective is at most the sweep's ``metric.target`` (W&B's),
    or None."""
    metric = sweep.config["metric"]
    if metric.get("target") is None:
        return None
    for runs in by_trial(trials).values():
        value = trial_objective(session, runs, metric["name"])
        if value is not None and value <= metric["target"]:
            return runs[0]
    return None


def by_trial(runs: list[Run]) -> dict[int, list[Run]]:
    """A sweep's runs by trial number, in order (a sweep over seeds has a run a seed in each trial)."""
    trials: dict[int, list[Run]] = {}
    for run in runs:
        trials.setdefault(run.trial, []).append(run)
    return trials


def report_evaluation(session: Session, *, study: Any, sweep_id: int, trial: int, run_id: int, step: int,
                      val_loss: float, train_loss: float, eval_every: int) -> bool:
    """A trial's evaluation to its study (the pruner's resource: evaluations so far) and the sweep's ``trial``
    event; True when the pruner says stop, with the run's log line saying so (uncommitted). Called by a local
    trial's job at each evaluation, and by the Slurm executor for the rows its trials report."""
    evaluation = -(-step // eval_every)
    prune = studies.report(study, trial, val_loss, evaluation)
    record_event(session, run_id=None, sweep_id=sweep_id, type=EventType.trial,
                 data={"kind": "pruned" if prune else "evaluated", "run_id": run_id, "trial": trial, "step": step,
                       "val_loss": val_loss, "train_loss": train_loss, "at": time.time()})  # at: the latency benchmark
    if prune:
        record_event(session, run_id=run_id, type=EventType.log,
                     data={"message": f"pruned by the sweep at step {step} (val {val_loss:.4f}): stopping"})
    return prune


def settle_running_sweeps(session: Session, *, settings: Settings) -> None:
    """Every running sweep settled: the worker's safety net for a trial whose end nobody settled (a job
    killed before it could)."""
    for sweep_id in session.exec(select(Sweep.id).where(Sweep.status == SweepStatus.running)).all():
        settle_sweep(session, sweep_id=sweep_id, settings=settings)


def add_trial(session: Session, sweep: Sweep, study: Any, settings: Settings) -> list[Run]:
    """The study's next trial queued: a run, or one a seed (one group) in a sweep over ``seeds``."""
    number, params = studies.ask(study, sweep.config)
    seeds = sweep.config.get("seeds", 1)
    body = RunCreate.model_validate({**sweep.config["base"], **params, "name": f"{sweep.name} · trial {number}",
                                     "tags": sweep.tags, "seeds": seeds if seeds > 1 else None})
    runs = add_runs(session, body=body, settings=settings, sweep_id=sweep.id, trial=number)
    for run in runs:
        record_event(session, run_id=None, sweep_id=sweep.id, type=EventType.trial,
                     data={"kind": "created", "run_id": run.id, "trial": number, "params": params})
    return runs


#: ``time_to_target`` of a trial that never reached its target: this plus its best validation loss, so it
#: ranks after every trial that did (no run trains for 30 years), the closer to the target first.
NEVER_REACHED_SEC = 1e9


#: ``induction_step`` of a trial whose heads never formed one: past any step a run takes, its best score deciding.
NEVER_FORMED_STEP = 1e9


def objective(session: Session, run: Run, metric: str) -> float | None:
    if metric == "val_loss":
        return run.best_val_loss
    if metric == "induction_step":
        heads = induction_figures(session, run_id=run.id)
        if heads["induction_formed_step"] is not None:
            return float(heads["induction_formed_step"])
        return None if heads["induction_score"] is None else NEVER_FORMED_STEP + 1 - heads["induction_score"]
    if metric == "time_to_target":
        if run.target_sec is not None:
            return run.target_sec
        return None if run.best_val_loss is None else NEVER_REACHED_SEC + run.best_val_loss
    last = session.exec(select(Metric).where(Metric.run_id == run.id, col(Metric.val_loss).is_not(None))
                        .order_by(col(Metric.step).desc()).limit(1)).first()
    if last is None:
        return None
    return last.val_loss if metric == "final_val_loss" else last.train_loss


def trial_objective(session: Session, runs: list[Run], metric: str) -> float | None:
    """A trial's objective: the mean of its runs' (one a seed) once every one succeeded with one; else None."""
    if any(RunStatus(r.status) != RunStatus.succeeded for r in runs):
        return None
    values = [objective(session, r, metric) for r in runs]
    return None if None in values else statistics.fmean(values)


def tell_result(session: Session, study: Any, runs: list[Run], metric: str) -> None:
    """A trial's result to its study once all its runs have ended: complete with the mean of their objectives
    when every one succeeded; else pruned when one was, else failed."""
    number = runs[0].trial
    if not all(RunStatus(r.status).finished for r in runs) or studies.is_finished(study, number):
        return
    ended = next((r for r in runs if r.status == RunStatus.pruned), None) or next(
        (r for r in runs if r.status != RunStatus.succeeded), runs[0])
    state = getattr(studies.TrialState, TRIAL_STATES.get(RunStatus(ended.status), "FAIL"))
    value = trial_objective(session, runs, metric)
    studies.tell(study, number, state, value)
    for run in runs:
        record_event(session, run_id=None, sweep_id=run.sweep_id, type=EventType.trial,
                     data={"kind": "finished", "run_id": run.id, "trial": number, "status": run.status,
                           "objective": value})


def sweep_summary(trials: list[Run]) -> str:
    counts = ", ".join(f"{n} {status}" for status, n in sorted(Counter(r.status for r in trials).items()))
    done = [r for r in trials if r.status == RunStatus.succeeded and r.best_val_loss is not None]
    best = min(done, key=lambda r: r.best_val_loss) if done else None
    found = f"; best val {best.best_val_loss:.4f} (trial {best.trial}, run {best.id})" if best else ""
    return f"{len(by_trial(trials))} trials: {counts}{found}"


def end_sweep(session: Session, sweep: Sweep, status: SweepStatus) -> None:
    sweep.status, sweep.finished_at = status, utcnow()
    session.add(sweep)
    record_event(session, run_id=None, sweep_id=sweep.id, type=EventType.sweep, data={"status": status})


def keep_top_checkpoints(session: Session, sweep: Sweep, trials: list[Run]) -> None:
    """best.pt of the ``keep_checkpoints`` trials with the lowest best validation loss; the others' go."""
    ranked = sorted((r for r in trials if r.best_val_loss is not None), key=lambda r: r.best_val_loss)
    for run in ranked[sweep.config["keep_checkpoints"]:]:
        if RunStatus(run.status).finished and run.checkpoint_path:
            remove_file(Path(run.checkpoint_path))
            run.checkpoint_path = None
            run.disk_bytes = run_disk_bytes(run)
            session.add(run)


def cancel_sweep(session: Session, *, sweep_id: int, settings: Settings) -> Sweep:
    sweep = lock_sweep(session, sweep_id)
    if sweep.status != SweepStatus.running:
        raise Conflict(f"sweep {sweep_id} has already ended ({sweep.status})")
    end_sweep(session, sweep, SweepStatus.cancelled)
    session.commit()
    for run in trials_of(session, sweep_id):
        if run.status in ACTIVE:
            cancel_run(session, run_id=run.id, settings=settings)
    settle_sweep(session, sweep_id=sweep_id, settings=settings)
    session.refresh(sweep)
    return sweep


def delete_sweep(session: Session, *, sweep_id: int, settings: Settings) -> None:
    sweep = get_sweep(session, sweep_id=sweep_id)
    if any(r.status == RunStatus.running for r in trials_of(session, sweep_id)):
        raise Conflict(f"sweep {sweep_id} has running trials; cancel it first")
    for run in trials_of(session, sweep_id):
        delete_run(session, run_id=run.id, settings=settings)
    session.delete(sweep)
    session.commit()
    studies.delete(settings, sweep_id)


# -- reading -----------------------------------------------------------------------------------------
def get_sweep(session: Session, *, sweep_id: int) -> Sweep:
    sweep = session.get(Sweep, sweep_id)
    if sweep is None:
        raise NotFound(f"sweep {sweep_id} does not exist")
    return sweep


def list_sweeps(session: Session) -> list[SweepPublic]:
    sweeps = session.exec(select(Sweep).order_by(col(Sweep.id).desc()).limit(200)).all()
    return [sweep_public(s, trials_of(session, s.id)) for s in sweeps]


def resolved_config(config: dict) -> dict:
    """A sweep's stored config with its base as every trial starts from it: the options given, then their
    recipe's values and the defaults (what the API and the page show)."""
    base = RunCreate.model_validate(config["base"]).model_dump(mode="json", exclude={"name", "tags"})
    return {**config, "base": base}


def sweep_public(sweep: Sweep, trials: list[Run]) -> SweepPublic:
    return SweepPublic.model_validate({**sweep.model_dump(), "config": shown_config(resolved_config(sweep.config)),
                                       "counts": dict(Counter(r.status for r in trials)),
                                       "disk_bytes": sum(r.disk_bytes for r in trials)})


def trial_public(session: Session, run: Run, config: dict, objective: float | None) -> TrialPublic:
    searched = [*studies.search_space(config), *studies.constants(config)]
    last_rate = session.exec(select(Metric.tokens_per_sec).where(Metric.run_id == run.id, Metric.tokens_per_sec > 0)
                             .order_by(col(Metric.step).desc()).limit(1)).first()
    return TrialPublic(run_id=run.id, trial=run.trial, seed=int(run.config["seed"]), name=run.name, status=run.status,
                       params={k: run.config.get(k) for k in searched}, last_step=run.last_step,
                       steps=int(run.config["steps"]), best_val_loss=run.best_val_loss,
                       objective=objective,
                       tokens_per_sec=last_rate, has_checkpoint=bool(run.checkpoint_path), disk_bytes=run.disk_bytes)


def sweep_detail(session: Session, *, sweep_id: int, settings: Settings) -> SweepDetail:
    sweep = get_sweep(session, sweep_id=sweep_id)
    trials = trials_of(session, sweep_id)
    metric = sweep.config["metric"]["name"]
    objectives = {number: trial_objective(session, runs, metric) for number, runs in by_trial(trials).items()}
    public = [trial_public(session, r, sweep.config, objectives[r.trial]) for r in trials]
    done = [t for t in public if t.objective is not None]
    best = min(done, key=lambda t: t.objective) if done else None
    study = studies.load(settings, sweep_id, sweep.config)
    return SweepDetail.model_validate({**sweep_public(sweep, trials).model_dump(), "trials": public, "best": best,
                                       "importance": studies.importance(study)})
