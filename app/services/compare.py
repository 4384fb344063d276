"""Runs side by side (``GET /api/compare``, the compare page): each run's figures from its evaluations and a
few aggregates (never every row), aligned evaluation steps, the largest gaps between the curves, and the
options that differ (webhook URLs as the request may see them)."""

from __future__ import annotations

from dataclasses import asdict

from sqlalchemy import func
from sqlmodel import Session, col, select

from tinygpt.options import option_value_text, unknown_name_message
from tinygpt.run_config import stored_model_config

from ..errors import Invalid
from ..models import MAX_INT64, Metric, MetricPublic, Run, RunPublic
from ..redaction import shown_config
from .group_stats import Spread, verdict, welch
from .metric_history import run_rate
from .runs import get_run

# -- comparison ---------------------------------------------------------------------------------
MAX_COMPARED_RUNS = 10  # one chart stays readable, and the page stays fast
MAX_GROUPED_RUNS = 30  # grouped, a chart draws a mean and a band per group: 5 groups of 3 seeds and more
#: What a group shows as mean +/- standard deviation (n), by the name each run's figures give it.
GROUP_FIGURES = {"best_val_loss": "best validation loss", "final_val_loss": "final validation loss",
                 "best_val_bpb": "best validation bits per byte", "target_sec": "time to target (s)",
                 "target_tokens": "tokens to target", "tokens_per_sec": "tokens/s", "peak_mem_mib": "peak memory (MiB)"}

def evaluation_rows(session: Session, *, run_id: int) -> list[MetricPublic]:
    """The rows with a validation loss, by step (their own index: no scan of the other rows)."""
    stmt = select(Metric).where(Metric.run_id == run_id, col(Metric.val_loss).is_not(None)).order_by(col(Metric.step))
    return [MetricPublic.model_validate(m) for m in session.exec(stmt)]

def run_figures(session: Session, run: Run, evals: list[MetricPublic]) -> dict:
    """What the comparison shows of one run, from its evaluations and a few aggregates (never every row)."""
    last_elapsed = session.exec(select(Metric.elapsed_sec).where(Metric.run_id == run.id)
                                .order_by(col(Metric.step).desc()).limit(1)).first()
    peak_mem = session.exec(select(func.max(Metric.peak_mem_mib)).where(Metric.run_id == run.id)).one()
    public = RunPublic.of(run)
    return {
        "id": run.id,
        "name": run.name,
        "device": run.device or run.requested_device,
        "device_name": (run.device_info or {}).get("name"),
        "worker": public.worker.model_dump() if run.worker else None,
        "origin": run.origin,
        "host": run.worker_host,
        "precision": run.precision,
        "status": run.status,
        "final_train_loss": evals[-1].train_loss if evals else None,
        "final_val_loss": evals[-1].val_loss if evals else None,
        "best_val_loss": min((m.val_loss for m in evals), default=None),
        "best_step": min(evals, key=lambda m: m.val_loss).step if evals else None,
        "tokens_per_sec": run_rate(session, run),
        "training_sec": last_elapsed,
        "peak_mem_mib": peak_mem,
        "best_val_bpb": public.best_val_bpb,
        "target_val_loss": run.target_val_loss,
        "time_to_target": public.time_to_target.model_dump() if public.time_to_target else None,
        "flops_per_token": flops_per_token(run),
    }


def flops_per_token(run: Run) -> int | None:
    """Training FLOPs per token of the run's model (the FLOPs x-axis: tokens seen times this); None for options
    this version cannot build a model from (an imported run's)."""
    try:
        return stored_model_config(run.config).training_flops_per_token
    except (ValueError, TypeError):
        return None


def target_ratios(summaries: list[dict]) -> None:
    """Each run's time and tokens to target against the first run's (the series' speed-up: time to the same
    loss): ``target_speedup_vs_first`` = first's seconds / this run's, ``target_tokens_vs_first`` = this run's
    tokens / first's. None where either has not reached it, or their targets differ."""
    first = summaries[0]
    for s in summaries:
        same = s["target_val_loss"] == first["target_val_loss"] and first["time_to_target"] and s["time_to_target"]
        mine, theirs = (s["time_to_target"], first["time_to_target"]) if same else ({}, {})
        s["target_speedup_vs_first"] = theirs["seconds"] / mine["seconds"] if same and mine["seconds"] else None
        s["target_tokens_vs_first"] = mine["tokens"] / theirs["tokens"] if same and theirs["tokens"] else None

def run_options(run: Run) -> dict:
    """A run's options as the comparison shows them (webhook URLs as the request may see them), with its device
    and its group (one submission over devices or seeds, and its repeats)."""
    return shown_config(run.config) | {"device": run.requested_device, "group": run.group_id}


def group_curve(members: list[list[MetricPublic]], flops: list[int | None]) -> dict:
    """A group's validation curve at the evaluation steps all its runs share: the mean loss and its bands (min to
    max, mean +/- one standard deviation), with the mean tokens seen, training seconds and training FLOPs there
    (the x-axes; FLOPs None when a run's model is unknown)."""
    by_step = [{m.step: m for m in evals} for evals in members]
    steps = sorted(set.intersection(*(set(b) for b in by_step))) if by_step else []
    curve: dict[str, list] = {k: [] for k in ("step", "tokens_seen", "elapsed_sec", "flops", "val_mean", "min", "max",
                                              "std_low", "std_high")}
    flops_known = None not in flops
    for step in steps:
        rows = [b[step] for b in by_step]  # evaluation rows: each has its validation loss
        spread = Spread.of([r.val_loss for r in rows])
        if spread is None:
            continue
        std = spread.std or 0.0
        curve["step"].append(step)
        curve["tokens_seen"].append(sum(r.tokens_seen for r in rows) / len(rows))
        curve["elapsed_sec"].append(sum(r.elapsed_sec for r in rows) / len(rows))
        curve["flops"].append(sum(r.tokens_seen * f for r, f in zip(rows, flops, strict=True)) / len(rows)
                              if flops_known else None)
        curve["val_mean"].append(spread.mean)
        curve["min"].append(min(r.val_loss for r in rows))
        curve["max"].append(max(r.val_loss for r in rows))
        curve["std_low"].append(spread.mean - std)
        curve["std_high"].append(spread.mean + std)
    return curve


def group_runs(runs: list[Run], summaries: list[dict], group_by: str,
               evals: dict[int, list[MetricPublic]] | None = None) -> dict:
    """Runs grouped by the value of one option (or by ``tag``, or ``group``: a submission's runs, or runs put
    together by hand with PATCH), in the order groups first appear: per group its runs and each
    figure's spread; for two groups, each figure's difference (second - first) with its 95 % interval, and the
    sentence for the best validation loss."""
    known = sorted({"tag", *set().union(*(run_options(r) for r in runs))})
    if group_by not in known:
        raise Invalid(unknown_name_message(group_by, known, "run option"), field="group_by")
    groups: dict[str, list[dict]] = {}
    for run, summary in zip(runs, summaries, strict=True):  # by tag: a run is in the group of each of its tags
        values = (run.tags or [None]) if group_by == "tag" else [run_options(run).get(group_by)]
        for value in values:
            groups.setdefault(option_value_text(value), []).append(summary)
    out = [{"label": f"{group_by} {value}", "value": value, "run_ids": [s["id"] for s in members],
            "figures": {name: spread_of(members, name) for name in GROUP_FIGURES},
            "curve": group_curve([evals[s["id"]] for s in members], [s["flops_per_token"] for s in members])
            if evals is not None else None}
           for value, members in groups.items()]
    result: dict = {"group_by": group_by, "groups": out, "difference": None, "verdict": None}
    if len(out) == 2:
        first, second = groups.values()
        result["difference"] = {name: difference_of(first, second, name) for name in GROUP_FIGURES}
        best_first, best_second = figure_values(first, "best_val_loss"), figure_values(second, "best_val_loss")
        if (d := welch(best_first, best_second)) is not None:
            result["verdict"] = verdict(out[1]["value"], out[0]["value"], GROUP_FIGURES["best_val_loss"], d,
                                        len(best_first), len(best_second))
    return result


def figure_values(members: list[dict], name: str) -> list[float]:
    values = [m["time_to_target"] and m["time_to_target"][{"target_sec": "seconds", "target_tokens": "tokens"}[name]]
              if name.startswith("target_") else m[name] for m in members]
    return [float(v) for v in values if v is not None]


def spread_of(members: list[dict], name: str) -> dict | None:
    spread = Spread.of(figure_values(members, name))
    return None if spread is None else asdict(spread)


def difference_of(first: list[dict], second: list[dict], name: str) -> dict | None:
    d = welch(figure_values(first, name), figure_values(second, name))
    return None if d is None else {**asdict(d), "low": d.low, "high": d.high, "within_noise": d.within_noise}


def compare_runs(session: Session, *, ids: list[int], group_by: str | None = None) -> dict:
    """Aligned metrics, final/best values, tok/s ratios and the largest gap between loss curves; with
    ``group_by``, the runs' groups too (:func:`group_runs`)."""
    if len(ids) < 2:
        raise Invalid("give at least two run ids to compare", field="ids")
    most = MAX_GROUPED_RUNS if group_by else MAX_COMPARED_RUNS
    if len(ids) > most:
        raise Invalid(f"compare at most {most} runs at once{' grouped' if group_by else ''} (got {len(ids)})",
                      field="ids")
    if not all(1 <= i <= MAX_INT64 for i in ids):
        raise Invalid("run ids must be positive 64-bit integers", field="ids")
    runs = [get_run(session, run_id=i) for i in ids]
    evals = {r.id: evaluation_rows(session, run_id=r.id) for r in runs}
    summaries = [run_figures(session, run, evals[run.id]) for run in runs]
    base = summaries[0]["tokens_per_sec"]
    for s in summaries:
        s["speedup_vs_first"] = s["tokens_per_sec"] / base if base and s["tokens_per_sec"] else None
    target_ratios(summaries)

    val_by_run = [{m.step: m for m in evals[r.id]} for r in runs]
    shared = sorted(set.intersection(*(set(v) for v in val_by_run)))
    aligned = [
        {"step": step, "runs": [{"train_loss": v[step].train_loss, "val_loss": v[step].val_loss} for v in val_by_run]}
        for step in shared
    ]
    max_val_gap = max_train_gap = None
    if shared:
        max_val_gap = max(max(v[s].val_loss for v in val_by_run) - min(v[s].val_loss for v in val_by_run) for s in shared)
        max_train_gap = max(
            max(v[s].train_loss for v in val_by_run) - min(v[s].train_loss for v in val_by_run) for s in shared
        )
    configs = [run_options(r) for r in runs]
    keys = sorted(set().union(*configs))
    differences = {k: [c.get(k) for c in configs] for k in keys if len({repr(c.get(k)) for c in configs}) > 1}
    return {
        "runs": summaries,
        "shared_eval_steps": shared,
        "aligned": aligned,
        "max_val_loss_gap": max_val_gap,
        "max_train_loss_gap": max_train_gap,
        "config_differences": differences,
        "grouped": group_runs(runs, summaries, group_by, evals) if group_by else None,
    }
