"""The model card of an export: ``README.md`` (a hub's YAML header, then what the model is, how it was trained,
its results with the loss curve, samples and how to use it) and ``loss_curve.svg``, filled from the checkpoint and
the run folder around it (``metrics.csv``, ``config.json``); the text lives in ``model_card.md``."""

from __future__ import annotations

import json
from pathlib import Path
from string import Template

from ..checkpoint import built_model
from ..records import StepMetrics, TargetReached, bits_per_byte, duration_text, read_metrics_csv
from ..sample import sample_text
from .families import Family
from .loss_curve import loss_curve_svg
from .source import ExportSource

TEMPLATE = Path(__file__).with_name("model_card.md")
SAMPLE_SETTINGS = {"temperature": 0.8, "top_k": 50, "seed": 1337}  # the template's sentence says the same
SAMPLE_TOKENS = 80


def table(rows: dict[str, str]) -> str:
    """A two-column Markdown table; a ``|`` in a value is escaped.

    >>> print(table({"steps": "1,500", "a|b": "c"}))
    | | |
    |---|---|
    | steps | 1,500 |
    | a\\|b | c |
    """
    lines = ["| | |", "|---|---|"]
    lines += [f"| {k.replace('|', chr(92) + '|')} | {v.replace('|', chr(92) + '|')} |" for k, v in rows.items()]
    return "\n".join(lines)


def run_resolved(folder: Path) -> dict:
    """The ``resolved`` part of the run folder's config.json (device, precision, bytes per token), or {}."""
    file = folder / "config.json"
    try:
        return json.loads(file.read_text(encoding="utf-8")).get("resolved", {}) if file.is_file() else {}
    except (OSError, json.JSONDecodeError, AttributeError):
        return {}


def run_name(folder: Path) -> str:
    """What the card calls the run: its folder's name (the dashboard's folders are run ids: "run 7").

    >>> run_name(Path("runs/7")), run_name(Path("runs/holmes"))
    ('run 7', 'holmes')
    """
    return f"run {folder.name}" if folder.name.isdigit() else folder.name


def yaml_header(source: ExportSource, family: Family, corpus: str, best: float | None, bpb: float | None) -> str:
    """The card's metadata for a model hub, as YAML whose values are JSON (a subset of YAML: no YAML library)."""
    metrics = [{"type": "loss", "name": "validation loss (nats per token)", "value": round(best, 4)}] if best else []
    if bpb:
        metrics.append({"type": "bpb", "name": "validation bits per byte", "value": round(bpb, 4)})
    fields = {
        "library_name": "transformers", "pipeline_tag": "text-generation", "license": "mit",
        "tags": ["tinygpt", "text-generation", "causal-lm", family.name], "datasets": [corpus],
        "model-index": [{"name": run_name(source.folder), "results": [{
            "task": {"type": "text-generation"}, "dataset": {"name": corpus, "type": corpus}, "metrics": metrics}]}],
    }
    return "\n".join(f"{key}: {json.dumps(value, ensure_ascii=False)}" for key, value in fields.items())


def samples_markdown(source: ExportSource, prompts: list[str]) -> str:
    model, tokenizer = built_model(source.config, source.weights), source.tokenizer  # the parts read already
    blocks = []
    for prompt in prompts:
        text = sample_text(model, tokenizer, prompt, SAMPLE_TOKENS, **SAMPLE_SETTINGS)
        blocks.append(f"Prompt `{prompt!r}`:\n\n```text\n{text}\n```")
    return "\n\n".join(blocks)


def card_fields(source: ExportSource, family: Family, rows: list[StepMetrics]) -> dict[str, str]:
    config, train, state = source.config, source.state.get("train_config") or {}, source.state
    resolved = run_resolved(source.folder)
    corpus_file = Path(str(train.get("corpus", ""))).name  # by its name: a card is for other people, not a path
    corpus = Path(corpus_file).stem or "unknown"
    best = state.get("best_val_loss")
    best = best if isinstance(best, float) and best != float("inf") else None
    bpb = bits_per_byte(best, resolved.get("val_bytes_per_token"))
    reached = TargetReached.first(rows, resolved.get("target_val_loss"))
    last = rows[-1] if rows else None
    results = {"best validation loss": f"{best:.4f} at step {state.get('step', 0):,}" if best else "not measured",
               "bits per byte": f"{bpb:.4f}" if bpb else "unknown"}
    if reached:
        results["time to target"] = reached.line()
    prompt = str(train.get("sample_prompt") or "")
    return {
        "header": yaml_header(source, family, corpus, best, bpb), "title": f"tinygpt {run_name(source.folder)}",
        "params": f"{config.num_params:,}", "data": f"`{corpus_file or 'unknown'}`",
        "hf_class": family.hf_class, "gguf_arch": family.gguf_arch, "results": table(results),
        "model": table({
            "parameters": f"{config.num_params:,}",
            "architecture": f"{family.arch} ({family.text()})",
            "layers x width, heads": f"{config.n_layers} x {config.d_model}, {config.n_heads} heads of {config.head_dim}",
            "MLP hidden width": f"{config.mlp_hidden:,}", "context": f"{config.context:,} tokens",
            "vocabulary": f"{config.vocab_size:,} (byte-level BPE)",
            "output head": "its own matrix" if config.untied_head else "tied to the token embedding"}),
        "training": table({
            "data": f"`{corpus_file or 'unknown'}`",
            "device, precision": f"{state.get('device', resolved.get('device', 'unknown'))}, "
                                 f"{state.get('precision', resolved.get('precision', 'unknown'))}",
            "steps": f"{last.step:,}" if last else f"{state.get('step', 0):,}",
            "tokens seen": f"{last.tokens_seen:,}" if last else "unknown",
            "training time": duration_text(last.elapsed_sec) if last else "unknown",
            "optimizer, learning rate": f"{train.get('optimizer', 'adamw')}, {train.get('lr', '')}",
            "batch x context": f"{train.get('batch_size', '')} x {config.context}"}),
        "options": json.dumps({**train, "corpus": corpus_file}, indent=2, ensure_ascii=False),
        "samples": samples_markdown(source, [prompt, ""] if prompt else [""]),
        "prompt": prompt.replace('"', '\\"'), "vocab": f"{config.vocab_size:,}",
        "recipe": str(train.get("recipe") or "series"),
    }


def write_card(source: ExportSource, family: Family, out: Path) -> None:
    """README.md and loss_curve.svg in ``out``."""
    metrics_file = source.folder / "metrics.csv"
    rows = read_metrics_csv(metrics_file) if metrics_file.is_file() else []
    (out / "loss_curve.svg").write_text(loss_curve_svg(rows), encoding="utf-8")
    text = Template(TEMPLATE.read_text(encoding="utf-8")).substitute(card_fields(source, family, rows))
    (out / "README.md").write_text(text, encoding="utf-8")
