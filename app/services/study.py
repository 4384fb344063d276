"""A sweep's Optuna study: its storage, sampler and pruner, built from the sweep's config.

The sampler and pruner are not stored by Optuna; every process (the app creating a sweep, the
job reporting an evaluation, whoever adds the next trial) rebuilds them from the sweep's config,
so they must be deterministic: the sampler's seed is the sweep's seed plus the trials so far.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from ..models.sweep_distributions import DISTRIBUTIONS, filled, ppf, quantile_range
from ..settings import Settings

optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial otherwise, in every job's log

MIN_TRIALS_FOR_IMPORTANCE = 4  # fANOVA over fewer finished trials says nothing


OPTUNA_SCHEMA = "optuna"  # PostgreSQL: Optuna's tables and its own alembic_version apart from ours


@lru_cache(maxsize=8)
def _storage(db_url: str, journal: str) -> BaseStorage:
    # PostgreSQL: Optuna's own tables in the dashboard's database (schema "optuna"), reached by every
    # worker. SQLite: Optuna's journal file (append-only, file-locked) beside the database, because
    # Optuna's RDB storage on the same SQLite file adds its own writers to SQLite's single write lock.
    if db_url.startswith("postgresql"):
        with sa.create_engine(db_url).begin() as conn:
            conn.execute(sa.text(f"CREATE SCHEMA IF NOT EXISTS {OPTUNA_SCHEMA}"))
        return RDBStorage(db_url, engine_kwargs={"pool_pre_ping": True,
                                                 "connect_args": {"options": f"-csearch_path={OPTUNA_SCHEMA}"}})
    return JournalStorage(JournalFileBackend(journal))


def storage(settings: Settings) -> BaseStorage:
    return _storage(settings.db_url, str(settings.home_dir / "optuna.journal"))


def study_name(sweep_id: int) -> str:
    return f"sweep-{sweep_id}"


# -- the search space --------------------------------------------------------------------------------
def constants(config: dict) -> dict[str, Any]:
    """Parameters with one ``value``: part of every trial's options, not searched."""
    return {name: p["value"] for name, p in config["parameters"].items() if p.get("value") is not None}


def distribution(p: dict) -> BaseDistribution:
    """A W&B parameter as what Optuna samples: the parameter itself where Optuna has its distribution, else the
    quantile whose W&B value :func:`value` gives (:mod:`app.models.sweep_distributions`)."""
    p = filled(p)  # a sweep stored before distributions were named and their defaults written
    kind = p["distribution"]
    if kind == "categorical":
        return CategoricalDistribution(p["values"])
    if kind == "int_uniform":
        return IntDistribution(p["min"], p["max"])
    if kind in ("uniform", "log_uniform_values"):
        return FloatDistribution(p["min"], p["max"], log=kind == "log_uniform_values")
    return FloatDistribution(*quantile_range(p))


def value(p: dict, sampled: Any) -> Any:
    """A trial's value of a searched parameter from what Optuna sampled for it (:func:`distribution`)."""
    p = filled(p)
    return sampled if DISTRIBUTIONS[p["distribution"]].native else ppf(p, sampled)


def search_space(config: dict) -> dict[str, BaseDistribution]:
    """What Optuna samples for each searched parameter: a grid's points, else :func:`distribution`."""
    if config["method"] == "grid":
        return {name: CategoricalDistribution(points) for name, points in grid(config).items()}
    return {name: distribution(p) for name, p in config["parameters"].items() if p.get("value") is None}


MAX_GRID_POINTS = 1000  # a grid of more needs run_cap; nor is a larger parameter listed
MAX_GRID_LISTED = 100_000  # points in all, with run_cap: Optuna's GridSampler lists every one


def grid_size(p: dict) -> int | None:
    """How many points a grid tries of a parameter (W&B's grid: its values; int_uniform's whole numbers; q_uniform
    min to max by q, max left out as numpy's arange does); None where a grid cannot take it."""
    p = filled(p)
    kind = p["distribution"]
    if kind == "categorical":
        return len(p["values"])
    if kind == "int_uniform":
        return p["max"] - p["min"] + 1
    if kind == "q_uniform":
        return math.ceil((p["max"] - p["min"]) / p["q"])
    return None


def grid_values(p: dict) -> list:
    """The points of :func:`grid_size`, listed (a parameter of at most MAX_GRID_POINTS)."""
    p = filled(p)
    size = grid_size(p)
    if size is None or size > MAX_GRID_POINTS:
        raise ValueError(f"a grid cannot list {p}")
    if p["distribution"] == "categorical":
        return list(p["values"])
    step = p.get("q", 1)
    whole = isinstance(step, int) and isinstance(p["min"], int)
    return [p["min"] + i * step if whole else round(p["min"] + i * step, 12) for i in range(size)]


def grid(config: dict) -> dict[str, list]:
    return {name: grid_values(p) for name, p in config["parameters"].items() if p.get("value") is None}


def trials_planned(config: dict) -> int:
    """run_cap, or for a grid without one, the grid's size (every point once)."""
    if config.get("run_cap"):
        return int(config["run_cap"])
    return grid_points(config)


def grid_points(config: dict) -> int:
    """How many points a grid sweep's grid has: the product of its parameters' :func:`grid_size`."""
    return math.prod(grid_size(p) for p in config["parameters"].values() if p.get("value") is None)


def sampler(config: dict, trials_so_far: int) -> optuna.samplers.BaseSampler:
    seed = config.get("seed", 0) + trials_so_far
    if config["method"] == "grid":
        return optuna.samplers.GridSampler(grid(config), seed=config.get("seed", 0))
    if config["method"] == "bayes":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, max(2, trials_planned(config) // 4)))
    return optuna.samplers.RandomSampler(seed=seed)


def evaluations(base: dict) -> int:
    """Evaluations after step 0 in a trial of these options: the pruner's resource."""
    return max(1, math.ceil(int(base["steps"]) / int(base["eval_every"])))


def pruner(config: dict) -> optuna.pruners.BasePruner:
    early = config.get("early_terminate")
    if not early:
        return optuna.pruners.NopPruner()
    if early["type"] == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=early["min_iter"])
    # W&B's "hyperband" stops a run at min_iter * eta**k evaluations unless it is in the best 1/eta of
    # the values reported there (one bracket, asynchronous): Optuna's SuccessiveHalvingPruner (ASHA).
    # Optuna's HyperbandPruner splits 16 trials over 3 brackets, one never pruned: 61% of the tokens
    # of no pruning in the sweep benchmark, against ASHA's (see BENCHMARKS.md).
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=early["min_iter"], reduction_factor=early["eta"])


# -- the study -----------------------------------------------------------------------------------
def create(settings: Settings, sweep_id: int) -> None:
    optuna.create_study(study_name=study_name(sweep_id), storage=storage(settings), direction="minimize",
                        load_if_exists=True)


def load(settings: Settings, sweep_id: int, config: dict, *, to_ask: bool = False) -> optuna.Study:
    """The sweep's study with its pruner; with its sampler only ``to_ask`` (a grid sampler's bookkeeping
    after a trial calls ``Study.stop``, which Optuna allows only inside ``optimize``)."""
    st = storage(settings)
    name = study_name(sweep_id)
    if to_ask:
        chosen = sampler(config, st.get_n_trials(st.get_study_id_from_name(name)))
    else:
        chosen = optuna.samplers.RandomSampler()  # never asked: report and tell only
    return optuna.load_study(study_name=name, storage=st, sampler=chosen, pruner=pruner(config))


def ask(study: optuna.Study, config: dict) -> tuple[int, dict[str, Any]]:
    """The next trial: its number and the options it sets (searched, then the constants)."""
    trial = study.ask(fixed_distributions=search_space(config))
    searched = trial.params if config["method"] == "grid" else {
        name: value(config["parameters"][name], sampled) for name, sampled in trial.params.items()}
    return trial.number, {**searched, **constants(config)}


def _trial(study: optuna.Study, number: int) -> optuna.Trial:
    """The trial of this number, to report to from the job's process: Optuna's ask-and-tell interface has
    no public way to reach a trial asked in another process, so this goes through the study's storage."""
    trial_id = study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    return optuna.Trial(study, trial_id)


def report(study: optuna.Study, number: int, value: float, evaluation: int) -> bool:
    """Report an evaluation's loss; True when the pruner says stop. A resumed trial reports the
    evaluations after its checkpoint again: Optuna keeps the first value of each."""
    trial = _trial(study, number)
    if math.isfinite(value):
        trial.report(value, evaluation)
    return trial.should_prune()


def is_finished(study: optuna.Study, number: int) -> bool:
    trial_id = study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    return study._storage.get_trial(trial_id).state.is_finished()


def tell(study: optuna.Study, number: int, state: TrialState, value: float | None = None) -> None:
    """The trial's result, once: a trial already told (a job that crashed after telling) is left."""
    if is_finished(study, number):
        return
    if state == TrialState.COMPLETE and (value is None or not math.isfinite(value)):
        state = TrialState.FAIL  # a run without a usable objective (NaN): a finding, not a result
    study.tell(number, value if state == TrialState.COMPLETE else None, state=state)


def importance(study: optuna.Study) -> dict[str, float] | None:
    """fANOVA importance of each searched option, once enough trials completed; None before."""
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    if len(done) < MIN_TRIALS_FOR_IMPORTANCE or not study.best_trial.distributions:
        return None
    varied = {name for t in done for name in t.distributions if len({str(u.params.get(name)) for u in done}) > 1}
    if not varied:
        return None
    return {k: round(v, 4) for k, v in optuna.importance.get_param_importances(study, params=sorted(varied)).items()}


def delete(settings: Settings, sweep_id: int) -> None:
    try:
        optuna.delete_study(study_name=study_name(sweep_id), storage=storage(settings))
    except KeyError:  # never created (the sweep failed before its first trial)
        pass
