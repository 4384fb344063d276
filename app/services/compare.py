"""Runs side by side (``GET /api/compare``, the compare page): each run's figures from its evaluations and a
few aggregates (never every row), aligned evaluation steps, the largest gaps between the curves, and the
options that differ (webhook URLs as the request may see them)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict

from sqlalchemy import func
from sqlmodel import Session, col, select

from tinygpt.options import option_value_text, unknown_name_message
from tinygpt.run_config import stored_model_config

from ..errors import Invalid
from ..models import MAX_INT64, Metric, MetricPublic, Run, RunPublic
from ..redaction import shown_config
from .group_stats import Spread, verdict, welch
from .groups import group_names
from .head_scores import induction_figures
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
        **induction_figures(session, run_id=run.id),
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

def run_options(run: Run, group_names: dict[str, str] | None = None) -> dict:
    """A run's options as the comparison shows them: as it resolved them (its preset's sizes, the warmup and the
    other rules at submission; ``precision`` and ``threads`` as its job resolved them on its device), webhook
    URLs as the request may see them, with its device and its group (by name where it has one)."""
    resolved = shown_config(run.config) | shown_config(run.resolved_config or {})
    if run.precision:  # "auto" as the job resolved it on its device
        resolved["precision"] = run.precision
    threads = (run.device_info or {}).get("threads")
    if not resolved.get("threads") and threads:  # unset: PyTorch's default, as the job found it
        resolved["threads"] = threads
    group = (group_names or {}).get(run.group_id, run.group_id) if run.group_id else None
    return resolved | {"device": run.requested_device, "group": group}


def resolved_differently(runs: list[Run]) -> list[dict]:
    """The options these runs asked for alike (``auto``, or left unset) that resolved differently, e.g. precision
    ``auto`` as fp32 on a busy worker and bf16 on another: a group mixing them compares unlike runs. Each with the
    sentence the compare page shows: "these runs differ in precision: fp32 x2, bf16 x1 (all asked for auto)".

    >>> from app.models import Run
    >>> runs = [Run(name="a", config={"precision": "auto"}, precision=p) for p in ("fp32", "bf16", "fp32")]
    >>> resolved_differently(runs)[0]["message"]
    'these runs differ in precision: fp32 x2, bf16 x1 (all asked for auto)'
    """
    if len(runs) < 2:
        return []
    asked = [shown_config(r.config) for r in runs]
    got = [run_options(r) for r in runs]
    out = []
    for key in sorted(set().union(*got) - {"device", "group"}):
        if len({repr(a.get(key)) for a in asked}) != 1 or len({repr(g.get(key)) for g in got}) == 1:
            continue
        counts = Counter(option_value_text(g.get(key)) for g in got)
        shown = ", ".join(f"{value} x{n}" for value, n in counts.items())
        wanted = option_value_text(asked[0].get(key)) if asked[0].get(key) is not None else "unset"
        out.append({"option": key, "asked": asked[0].get(key), "counts": dict(counts),
                    "message": f"these runs differ in {key}: {shown} (all asked for {wanted})"})
    return out


def mean_of_known(values: list[float | int | None]) -> float | None:
    """The mean, or None where a run does not know its value (another trainer's run that logs no tokens or time).

    >>> mean_of_known([1, 2]), mean_of_known([1, None])
    (1.5, None)
    """
    return None if not values or None in values else sum(values) / len(values)


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
        curve["tokens_seen"].append(mean_of_known([r.tokens_seen for r in rows]))
        curve["elapsed_sec"].append(mean_of_known([r.elapsed_sec for r in rows]))
        curve["flops"].append(mean_of_known([r.tokens_seen * f if r.tokens_seen is not None else None
                                             for r, f in zip(rows, flops, strict=True)]) if flops_known else None)
        curve["val_mean"].append(spread.mean)
        curve["min"].append(min(r.val_loss for r in rows))
        curve["max"].append(max(r.val_loss for r in rows))
        curve["std_low"].append(spread.mean - std)
        curve["std_high"].append(spread.mean + std)
    return curve


def group_key(run: Run, group_by: str) -> list[str | None]:
    """The groups a run falls in: by tag, one per tag; by group, its group's id; else its option's value."""
    if group_by == "tag":
        return run.tags or [None]
    return [run.group_id if group_by == "group" else option_value_text(run_options(run).get(group_by))]


def group_label(group_by: str, key: str | None, group_names: dict[str, str]) -> tuple[str, str]:
    """What a group is called (the chart's legend, the table's heading) and its value in the sentence: a group's
    name, else the option and its value ("device cuda", "cuda")."""
    if group_by == "group":
        name = group_names.get(key, key) if key else "no group"
        return name, name
    value = option_value_text(key)
    return f"{group_by} {value}", value


def group_runs(runs: list[Run], summaries: list[dict], group_by: str,
               evals: dict[int, list[MetricPublic]] | None = None, group_names: dict[str, str] | None = None) -> dict:
    """Runs grouped by the value of one option (or by ``tag``, or ``group``: a submission's runs, or runs put
    together by hand with PATCH, called by their names), in the order groups first appear: per group its runs,
    each figure's spread and the options its runs resolved differently; for two groups, each figure's difference
    (second - first) with its 95 % interval, and the sentence for the best validation loss."""
    known = sorted({"tag", *set().union(*(run_options(r) for r in runs))})
    if group_by not in known:
        raise Invalid(unknown_name_message(group_by, known, "run option"), field="group_by")
    groups: dict[str | None, list[tuple[Run, dict]]] = {}
    for run, summary in zip(runs, summaries, strict=True):  # by tag: a run is in the group of each of its tags
        for key in group_key(run, group_by):
            groups.setdefault(key, []).append((run, summary))
    out = []
    for key, pairs in groups.items():
        members = [s for _, s in pairs]
        label, value = group_label(group_by, key, group_names or {})
        out.append({"label": label, "value": value, "group_id": key if group_by == "group" else None,
                    "run_ids": [s["id"] for s in members],
                    "figures": {name: spread_of(members, name) for name in GROUP_FIGURES},
                    "resolved_differently": resolved_differently([r for r, _ in pairs]),
                    "curve": group_curve([evals[s["id"]] for s in members], [s["flops_per_token"] for s in members])
                    if evals is not None else None})
    result: dict = {"group_by": group_by, "groups": out, "difference": None, "verdict": None}
    if len(out) == 2:
        first, second = ([s for _, s in pairs] for pairs in groups.values())
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
        train_gaps = [max(losses) - min(losses) for s in shared
                      if None not in (losses := [v[s].train_loss for v in val_by_run])]
        max_train_gap = max(train_gaps) if train_gaps else None  # other trainers' rows may log no training loss
    names = group_names(session, group_ids=(r.group_id for r in runs))
    configs = [run_options(r, names) for r in runs]
    keys = sorted(set().union(*configs))
    differences = {k: [c.get(k) for c in configs] for k in keys if len({repr(c.get(k)) for c in configs}) > 1}
    return {
        "runs": summaries,
        "shared_eval_steps": shared,
        "aligned": aligned,
        "max_val_loss_gap": max_val_gap,
        "max_train_loss_gap": max_train_gap,
        "config_differences": differences,
        "resolved_differently": resolved_differently(runs),
        "grouped": group_runs(runs, summaries, group_by, evals, names) if group_by else None,
    }
