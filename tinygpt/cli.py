"""The ``tinygpt`` command.

    tinygpt info --preset holmes
    tinygpt tokenizer train --corpus holmes.txt --vocab-size 4096 --out tok.json
    tinygpt train --preset tiny --steps 200 --out runs/tiny
    tinygpt sample runs/tiny/best.pt --prompt Holmes --max-tokens 100
    tinygpt neighbors runs/tiny/best.pt " Holmes"
    tinygpt inspect runs/tiny/best.pt --text "Holmes said"
    tinygpt data holmes --out holmes.txt
    tinygpt bench --preset holmes --device cpu --batch-sizes 8,16,32 --threads 1,2
    tinygpt train --preset holmes --out runs/h200 --report-to http://dashboard:8000 --token TOKEN
    tinygpt sync runs/h200 --url http://dashboard:8000
    tinygpt import runs/h200 docs/runs/h200-holmes-1500-bf16.csv --config options.json --device-name "NVIDIA H200"

Errors in what the user typed or pointed at end in one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import __version__
from . import export as export_formats
from .corpus import CorpusError
from .dashboard_client import DashboardError
from .errors import CheckpointError
from .gutenberg import GUTENBERG_URL, DownloadError
from .options import Option
from .paths import Paths
from .presets import ARCHS, PRESETS, UnknownPresetError
from .records import Callbacks
from .report import CHECKPOINT_MODES, Reporter
from .run_config import TrainConfig
from .run_import import RunImportError, read_config_arg, train_options
from .stop_signals import set_on_signals
from .tokenizer import TokenizerError

EXPECTED_ERRORS = (ValueError, CorpusError, TokenizerError, CheckpointError, DownloadError, UnknownPresetError, OSError,
                   DashboardError, RunImportError)
DEFAULT_DASHBOARD = "http://127.0.0.1:8000"


# -- argument types: one-line messages for bad values ---------------------------------
def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def unit_float(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0.0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0.0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"must be comma-separated positive integers, got {text!r}")
    return values


def precision_list(text: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in ("auto", "fp32", "bf16", "fp16")]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"precisions are auto, fp32, bf16, fp16; got {text!r}")
    return values


@dataclass(frozen=True)
class ExtraCommand:
    """A subcommand added by a program built on the library (the dashboard adds serve, app, worker)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def option_type(spec: Option) -> Callable[[str], object]:
    """argparse type for a run option: its own parse and check, with the message every layer shows."""

    def parse(text: str) -> object:
        try:
            return spec.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = spec.name  # argparse names the type in some messages
    return parse


def option_help(spec: Option) -> str:
    parts = [spec.help]
    if spec.choices:
        parts.append(f"one of {', '.join(spec.choices)}")
    elif spec.range_text():
        parts.append(spec.range_text())
    parts.append(f"default: {spec.none}" if spec.default is None else f"default: {spec.default}")
    return "; ".join(parts)


def add_option_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per run option (:data:`tinygpt.run_config.OPTIONS`), in the declaration's groups."""
    from .options import GROUPS
    from .run_config import OPTIONS

    groups = {name: parser.add_argument_group(f"{name} options") for name in GROUPS}
    for spec in OPTIONS.values():
        group = groups[spec.group]
        # no default here: a flag not given leaves the option to --config, then to the declaration
        if spec.kind is bool:
            # --flag / --no-flag: an option that is on by default can be turned off
            group.add_argument(spec.flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                               help=option_help(spec))
        else:
            group.add_argument(spec.flag, type=option_type(spec), default=argparse.SUPPRESS,
                               metavar=spec.name.upper(), help=option_help(spec))


def add_token_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--token", help="the dashboard's API token (default: $TINYGPT_API_TOKEN)")


def build_parser(extra: Sequence[ExtraCommand] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tinygpt", description="Train, sample and inspect tiny GPTs.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("info", help="presets, parameter breakdown, untrained loss, devices")
    p.add_argument("--preset", choices=list(PRESETS), help="show one preset's breakdown and untrained loss")
    p.add_argument("--arch", choices=list(ARCHS), help="architecture (default: the preset's)")

    p = sub.add_parser("tokenizer", help="tokenizer commands")
    tsub = p.add_subparsers(dest="tokenizer_command", required=True, metavar="ACTION")
    t = tsub.add_parser("train", help="train a byte-level BPE tokenizer")
    t.add_argument("--corpus", required=True, type=Path)
    t.add_argument("--vocab-size", type=int, default=4096)
    t.add_argument("--out", required=True, type=Path)

    p = sub.add_parser("train", help="train a model", description="Train a model. The run options below are the "
                       "dashboard's too (tinygpt/run_config.py declares each once).")
    add_option_flags(p)
    p.add_argument("--config", help="run options as a JSON file (the API's body, or a run folder's config.json) "
                   "or '{...}'; the flags given win; an unknown option is refused")
    p.add_argument("--corpus", type=Path, help="UTF-8 text file (default: the Holmes corpus)")
    p.add_argument("--out", type=Path, required=True, help="run folder (metrics.csv, best.pt, config.json)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/last.pt")
    p.add_argument("--no-progress", action="store_true", help="print a line per evaluation instead of a bar")
    r = p.add_argument_group("reporting to a dashboard")
    r.add_argument("--report-to", metavar="URL", help="a dashboard to stream this run to, e.g. http://gpu-box:8000 "
                   "(default: $TINYGPT_REPORT_TO; unset: none)")
    add_token_argument(r)
    r.add_argument("--report-run", type=positive_int, metavar="ID", help="the dashboard's run this trains, made "
                   "there and submitted by its executor (Slurm); default: a new run")
    r.add_argument("--scheduled", action="store_true", help="run by a scheduler (Slurm): SIGTERM (its time limit, "
                   "a preemption, scancel) stops at the next step with last.pt saved, and the run's end is the "
                   "scheduler's to tell; without it SIGTERM ends the run cancelled, also with last.pt saved")
    r.add_argument("--report-checkpoints", choices=CHECKPOINT_MODES, default="end", help="upload best.pt at the "
                   "end (default), at each new best, or never")
    r.add_argument("--name", help="the run's name on the dashboard (default: the run folder's name)")
    r.add_argument("--tag", action="append", default=[], help="a tag on the dashboard (repeatable)")
    r.add_argument("--notify-url", action="append", default=[], metavar="URL", help="a webhook that gets this "
                   "run's alerts, besides the dashboard's own (repeatable; the dashboard's rules for receivers apply)")
    r.add_argument("--notify", metavar="ALERTS", help="which alerts to send, comma-separated, e.g. "
                   "failed,nonfinite_loss,stalled (default: all)")

    p = sub.add_parser("sync", help="send what a run trained with --report-to has not sent yet (offline runs)")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--url", help="the dashboard (default: $TINYGPT_REPORT_TO, else the one the run reported to, "
                   "asked without the token: it is sent only to an address you give)")
    add_token_argument(p)

    p = sub.add_parser("wandb-path", help="the folder whose `wandb` module reports a W&B-style script here",
                       description="Print the folder to put first on a W&B-style script's path: its `wandb` "
                       "reports wandb.init/log/config/summary/finish to the dashboard, with environment changes "
                       "only: PYTHONPATH=$(tinygpt wandb-path) WANDB_BASE_URL=http://dashboard:8000 "
                       "WANDB_API_KEY=$TOKEN python train.py")

    p = sub.add_parser("import", help="bring finished run folders, metrics CSV files, TensorBoard folders or "
                       "speedrun logs (nanoGPT, llm.c, modded-nanogpt) into a dashboard")
    p.add_argument("paths", type=Path, nargs="+", metavar="RUN_DIR_CSV_TENSORBOARD_OR_LOG")
    p.add_argument("--url", help=f"the dashboard (default: $TINYGPT_REPORT_TO, else {DEFAULT_DASHBOARD})")
    add_token_argument(p)
    p.add_argument("--config", help="run options as a JSON file or '{...}': needed for a bare CSV, overrides "
                   "config.json; for another trainer's files its params (the run's config)")
    p.add_argument("--device", help="another trainer's run: the device it trained on (cpu, cuda, mps, ...)")
    p.add_argument("--tokens-per-step", type=positive_int, help="another trainer's run: tokens a step trains on "
                   "(batch x context x accumulation), where its logs do not count tokens")
    p.add_argument("--target", type=positive_float, help="another trainer's run: the validation loss whose first "
                   "reaching is timed (none by default: its tokenizer is its own)")
    p.add_argument("--device-name", help='the device it ran on, e.g. "NVIDIA H200"')
    p.add_argument("--name", help="the run's name (default: the folder's or file's name)")
    p.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")

    p = sub.add_parser("sample", help="generate text from a checkpoint")
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--prompt", default="Holmes")
    p.add_argument("--max-tokens", type=non_negative_int, default=200)
    p.add_argument("--temperature", type=non_negative_float, default=0.8)
    p.add_argument("--top-k", type=positive_int)
    p.add_argument("--top-p", type=unit_float)
    p.add_argument("--seed", type=int)
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-cache", action="store_true", help="recompute the whole window for every token")

    p = sub.add_parser("neighbors", help="nearest tokens by embedding cosine similarity")
    p.add_argument("checkpoint", type=Path)
    p.add_argument("word", help='a single token, e.g. " Holmes" (with its leading space)')
    p.add_argument("-k", type=positive_int, default=10)

    p = sub.add_parser("inspect", help="inside a checkpoint: a passage's loss per token and each head's role scores "
                       "(previous token, induction, first token, entropy)")
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--text", default="", help="a passage (at most the model's context in tokens); default: the "
                   "head scores alone, on the induction probe")
    p.add_argument("--device", default="cpu")

    p = sub.add_parser("export", help="a checkpoint for other tools: transformers, llama.cpp (GGUF), safetensors")
    p.add_argument("source", type=Path, help="a checkpoint (best.pt) or a run folder (its best.pt)")
    p.add_argument("--format", choices=export_formats.FORMATS, required=True,
                   help="hf: a folder AutoModelForCausalLM and AutoTokenizer load, with a model card; gguf: one "
                        "file for llama.cpp; safetensors: our weights with the configs as metadata")
    p.add_argument("--out", type=Path, required=True, help="the folder (hf) or file (gguf, safetensors) to write")
    p.add_argument("--dtype", choices=export_formats.DTYPE_NAMES, default="fp32")
    p.add_argument("--quant", choices=export_formats.QUANTS, help="gguf only: quantize the 2-D weights")

    p = sub.add_parser("bench", help="training-step speed over batch sizes x precisions (x CPU threads)")
    p.add_argument("--preset", choices=list(PRESETS), default="holmes")
    p.add_argument("--arch", choices=list(ARCHS))
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N, mps or xla")
    p.add_argument("--batch-sizes", type=int_list, default=[8, 16, 32], help="comma-separated (default: 8,16,32)")
    p.add_argument("--precisions", type=precision_list, help="comma-separated, e.g. fp32,bf16,auto (default: "
                   "what the device supports)")
    p.add_argument("--threads", type=int_list, help="CPU thread counts to sweep, e.g. 1,2 (default: PyTorch's)")
    p.add_argument("--steps", type=positive_int, default=5, help="timed steps per cell")
    p.add_argument("--warmup", type=non_negative_int, default=2, help="untimed steps per cell")
    p.add_argument("--json", action="store_true", help="print a JSON list of cells instead of a table")

    p = sub.add_parser("data", help="download corpora")
    dsub = p.add_subparsers(dest="dataset", required=True, metavar="DATASET")
    d = dsub.add_parser("holmes", help="the nine Holmes books from Project Gutenberg")
    d.add_argument("--out", type=Path, help="default: $TINYGPT_HOME/datasets/holmes.txt")
    d.add_argument("--mirror", default=GUTENBERG_URL, help="URL template with {id} (default: %(default)s)")
    for command in extra:
        command.add_arguments(sub.add_parser(command.name, help=command.help))
    return parser


# -- commands ------------------------------------------------------------------------------
def cmd_info(args: argparse.Namespace, paths: Paths) -> int:
    from .info import print_devices, print_preset_info, print_presets

    if args.preset:
        return print_preset_info(args.preset, args.arch)
    print_presets()
    print_devices()
    return 0


def cmd_tokenizer_train(args: argparse.Namespace, paths: Paths) -> int:
    from .corpus import read_corpus
    from .tokenizer import Tokenizer

    if not 256 <= args.vocab_size <= 65536:
        raise ValueError(f"--vocab-size must be in [256, 65536], got {args.vocab_size}")
    text = read_corpus(args.corpus)
    t0 = time.perf_counter()
    tok = Tokenizer.train(text, args.vocab_size)
    seconds = time.perf_counter() - t0
    tok.save(args.out)
    n = len(tok.encode(text))
    print(f"trained {tok.vocab_size} ids in {seconds:.1f} s; corpus = {n:,} tokens "
          f"({len(text.encode()) / n:.2f} bytes/token); saved {args.out}")
    return 0


def cmd_train(args: argparse.Namespace, paths: Paths) -> int:
    """Options, corpus and dashboard are checked before torch is imported: a mistake in any of them is a one-line
    error at once."""
    from .progress import ProgressCallbacks
    from .ranks import dist_info
    from .records import CallbackList
    from .run_config import OPTIONS, unused_options

    corpus = args.corpus or paths.holmes_corpus()
    from_file = train_options(read_config_arg(args.config)) if args.config else {}
    flags = {name: getattr(args, name) for name in OPTIONS if hasattr(args, name)}
    # resolved as the dashboard resolves a submission: config.json and the checkpoints say what the run means
    config = TrainConfig.from_dict({**from_file, **flags, "corpus": str(corpus)}).resolved()
    for warning in unused_options([*from_file, *flags], config):
        print(f"tinygpt: warning: {warning}", file=sys.stderr)
    if not corpus.exists() and args.corpus is None:
        raise CorpusError(f"no corpus at {corpus}; run `tinygpt data holmes` or pass --corpus PATH")
    dist = dist_info()  # launched by torchrun: one rank of several (DistributedDataParallel)
    reporter = start_reporting(args, paths, config) if dist.is_main else None
    from . import distributed
    from .train import NonFiniteLoss, Trainer

    progress = ProgressCallbacks(total_steps=config.steps, bar=not args.no_progress and dist.is_main)
    terminated = StopOnSignal()  # SIGTERM: stop at the next step boundary, last.pt saved
    callbacks = CallbackList(progress, terminated, *([reporter] if reporter else []))
    try:
        trainer = Trainer(config, args.out, callbacks=callbacks, cache_dir=paths.cache_dir, resume=args.resume,
                          dist=dist)
        result = trainer.run()
    except NonFiniteLoss as exc:  # a finding about the run, not a usage error: exit 1
        progress.close()
        end_reporting(reporter, args.out, "failed", error=str(exc), alert="nonfinite_loss")
        print(f"tinygpt train: {exc}; files in {args.out}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        progress.close()
        end_reporting(reporter, args.out, "cancelled", error="interrupted (Ctrl-C)")
        raise
    except Exception as exc:  # reported as the run's failure, then shown as usual
        progress.close()
        end_reporting(reporter, args.out, "failed", error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        progress.close()
        distributed.stop()
    if not dist.is_main:
        return 0
    if terminated.signalled.is_set():
        return stopped_by_sigterm(reporter, args, result.steps_done, result.out_dir)
    if reporter is not None and reporter.should_stop():
        end_reporting(reporter, args.out, "cancelled", error="cancelled from the dashboard")
        print(f"tinygpt train: cancelled from the dashboard at step {result.steps_done}; last.pt saved in "
              f"{result.out_dir}", file=sys.stderr)
        return 1
    end_reporting(reporter, args.out, "succeeded", stop_reason=result.stop_reason)
    best = f"{result.best_val_loss:.4f} at step {result.best_step}" if result.best_val_loss is not None else "n/a"
    ranks = f" x {dist.world_size} processes" if dist.enabled else ""
    if result.stop_reason:
        print(result.stop_reason)
    print(f"done: {result.steps_done} steps on {result.device}{ranks} ({result.precision}); best val {best}; "
          f"files in {result.out_dir}")
    return 0


class StopOnSignal(Callbacks):
    """Stops the training at the next step boundary once SIGTERM came (the trainer then saves last.pt)."""

    def __init__(self) -> None:
        self.signalled = threading.Event()
        if threading.current_thread() is threading.main_thread():
            set_on_signals(self.signalled, [signal.SIGTERM])

    def should_stop(self) -> bool:
        return self.signalled.is_set()


def stopped_by_sigterm(reporter: Reporter | None, args: argparse.Namespace, step: int, out: Path) -> int:
    """SIGTERM stopped the run at ``step`` with last.pt saved: under a scheduler (``--scheduled``) the run's
    end is the scheduler's word (a time limit, a preemption that requeues it, a cancel), so only a log line is
    reported; otherwise the run ends cancelled. Exits 143, as a process that SIGTERM ends does."""
    message = f"stopped by SIGTERM at step {step}; last.pt saved in {out}"
    if reporter is not None and args.scheduled:
        reporter.add("log", {"message": f"{message} (the scheduler's signal: time limit, preemption or cancel)"})
        if not reporter.sender.drain(30.0):
            print(f"tinygpt: warning: {reporter.journal.pending()} report item(s) not sent yet; `tinygpt sync "
                  f"{args.out}` sends them", file=sys.stderr)
    else:
        end_reporting(reporter, args.out, "cancelled", error=message)
    print(f"tinygpt train: {message}", file=sys.stderr)
    return 143


def start_reporting(args: argparse.Namespace, paths: Paths, config: TrainConfig) -> Reporter | None:
    """``--report-to``: a bad address or a refused token stops here, before any training."""
    url = args.report_to or paths.report_to
    if not url:
        return None
    from .report import open_report, run_meta

    meta = run_meta(config, name=args.name, tags=args.tag, out_dir=args.out,
                    notify_urls=args.notify_url, notify_events=args.notify.split(",") if args.notify else None)
    return open_report(url, args.token or paths.api_token, out_dir=args.out, meta=meta, resume=args.resume,
                       checkpoints=args.report_checkpoints, run_id=args.report_run)


def end_reporting(reporter: Reporter | None, out: Path, status: str, **fields: str | None) -> None:
    if reporter is None:
        return
    if not reporter.finish(status, **fields):
        left = reporter.journal.pending()
        print(f"tinygpt: warning: {left} report item(s) not sent yet; send them with `tinygpt sync {out}` "
              "when the dashboard answers", file=sys.stderr)


def cmd_sync(args: argparse.Namespace, paths: Paths) -> int:
    from .report import sync_run

    run_id, sent = sync_run(args.run_dir, url=args.url or paths.report_to, token=args.token or paths.api_token)
    print(f"synced {args.run_dir}: {sent} item(s) sent; run {run_id}")
    return 0


def cmd_wandb_path(args: argparse.Namespace, paths: Paths) -> int:
    from . import wandb_dropin

    print(Path(wandb_dropin.__file__).parent)
    return 0


def cmd_import(args: argparse.Namespace, paths: Paths) -> int:
    from .dashboard_client import DashboardClient
    from .run_import import foreign_payload, import_payload, is_foreign

    client = DashboardClient(args.url or paths.report_to or DEFAULT_DASHBOARD, args.token or paths.api_token)
    for path in args.paths:
        if is_foreign(path):
            payload = foreign_payload(path, config_arg=args.config, device=args.device, device_name=args.device_name,
                                      name=args.name, tags=args.tag, tokens_per_step=args.tokens_per_step,
                                      target=args.target)
            run = client.import_foreign(payload)
            print(f"imported {path} ({payload['source']}) as run {run['id']} ({len(payload['points'])} values, "
                  f"{run['last_step']} steps): {client.url}/runs/{run['id']}")
            continue
        payload, checkpoint = import_payload(path, config_arg=args.config, device_name=args.device_name,
                                             name=args.name, tags=args.tag)
        run = client.import_run(payload)
        if checkpoint is not None:
            client.upload_checkpoint(run["id"], checkpoint)
        with_checkpoint = " with its best checkpoint" if checkpoint is not None else ""
        print(f"imported {path} as run {run['id']} ({len(payload['metrics'])} rows{with_checkpoint}): "
              f"{client.url}/runs/{run['id']}")
    return 0


def cmd_sample(args: argparse.Namespace, paths: Paths) -> int:
    from .checkpoint import load_model
    from .device import resolve_device
    from .sample import stream_text

    model, tokenizer, _ = load_model(args.checkpoint, resolve_device(args.device))
    sys.stdout.write(args.prompt)
    for piece in stream_text(
        model, tokenizer, args.prompt, args.max_tokens, temperature=args.temperature, top_k=args.top_k,
        top_p=args.top_p, seed=args.seed, use_cache=not args.no_cache,
    ):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return 0


def cmd_neighbors(args: argparse.Namespace, paths: Paths) -> int:
    from .checkpoint import load_model
    from .sample import nearest_tokens

    model, tokenizer, _ = load_model(args.checkpoint)
    for token, sim in nearest_tokens(model, tokenizer, args.word, args.k):
        print(f"{sim:+.3f}  {token!r}")
    return 0


def cmd_inspect(args: argparse.Namespace, paths: Paths) -> int:
    import torch

    from .checkpoint import load_model
    from .device import resolve_device
    from .inside import bits, head_scores, look_inside, score_table

    model, tokenizer, _ = load_model(args.checkpoint, resolve_device(args.device))
    if args.text:
        ids = tokenizer.encode(args.text)
        if not 2 <= len(ids) <= model.config.context:
            raise SystemExit(f"tinygpt inspect: --text is {len(ids)} tokens; a passage is 2 to "
                             f"{model.config.context} (the model's context)")
        seen = look_inside(model, torch.tensor(ids))
        n_bytes = len(tokenizer.decode_bytes(ids[1:]))
        print(f"{len(ids)} tokens, mean loss {seen.mean_loss:.4f} nats ({bits(seen.mean_loss):.4f} bits) per "
              f"predicted token, {bits(float(seen.token_loss.sum())) / n_bytes:.4f} bits per byte")
        worst = seen.token_loss.topk(min(5, len(ids) - 1))
        print("most surprising: " + ", ".join(f"{tokenizer.decode([ids[i + 1]])!r} {float(v):.2f}"
                                              for v, i in zip(worst.values, worst.indices, strict=True)))
    print("\n".join(score_table(head_scores(model, vocab_size=tokenizer.vocab_size))))
    return 0


def cmd_export(args: argparse.Namespace, paths: Paths) -> int:
    out = export_formats.export(args.source, args.out, format=args.format, dtype=args.dtype, quant=args.quant)
    print(f"wrote {out}")
    return 0


def cmd_bench(args: argparse.Namespace, paths: Paths) -> int:
    import json

    from .bench import CELL_FIELDS, SweepConfig, format_table, sweep
    from .device import cpu_summary, describe_device, resolve_device
    from .progress import SweepProgress

    config = SweepConfig(preset=args.preset, arch=args.arch, device=args.device, batch_sizes=args.batch_sizes,
                         precisions=args.precisions, threads=args.threads, steps=args.steps, warmup=args.warmup)
    device = resolve_device(config.device)
    described = describe_device(device)
    progress = SweepProgress(enabled=not args.json)
    try:
        cells = sweep(config, on_cell=progress)
    finally:
        progress.close()
    if args.json:
        cell_dicts = [{k: c.to_dict()[k] for k in CELL_FIELDS} for c in cells]
        print(json.dumps({"device": str(device), "device_info": described, "cells": cell_dicts}, indent=2))
    else:
        print(f"{device}: {described.get('name')}" + (f"; CPU flags: {cpu_summary()}" if device.type == "cpu" else ""))
        print(format_table(cells))
    return 0


def cmd_data(args: argparse.Namespace, paths: Paths) -> int:
    from .gutenberg import download_holmes

    out = args.out or paths.home / "datasets" / "holmes.txt"
    path = download_holmes(out, url_template=args.mirror)
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


COMMANDS = {
    "info": cmd_info,
    "train": cmd_train,
    "sample": cmd_sample,
    "neighbors": cmd_neighbors,
    "inspect": cmd_inspect,
    "data": cmd_data,
    "bench": cmd_bench,
    "sync": cmd_sync,
    "import": cmd_import,
    "export": cmd_export,
    "wandb-path": cmd_wandb_path,
}


def main(argv: Sequence[str] | None = None, extra: Sequence[ExtraCommand] = (), paths: Paths | None = None) -> int:
    """``paths``: given by a program built on the library (the dashboard's settings); default: the environment's."""
    parser = build_parser(extra)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    extra_by_name = {c.name: c for c in extra}
    try:
        if args.command in extra_by_name:
            return extra_by_name[args.command].run(args)
        handler = cmd_tokenizer_train if args.command == "tokenizer" else COMMANDS[args.command]
        return handler(args, paths or Paths.from_environment())
    except EXPECTED_ERRORS as exc:
        print(f"tinygpt {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
