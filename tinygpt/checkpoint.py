"""Checkpoints: everything needed to sample from a model or resume its training.

A checkpoint holds the model weights (never the ``torch.compile`` wrapper), the
optimizer and gradient-scaler state, the step, the model and training configs, the
tokenizer (inline, so a checkpoint file is self-contained), the best validation
loss so far and the RNG states (batch sampler, CPU, CUDA).

Files are written to a temporary name and renamed into place, so a crash while
writing never leaves a half-written checkpoint under the real name.

A ``.safetensors`` file that ``tinygpt export --format safetensors`` wrote reads as a checkpoint too (its
weights, with the configs and tokenizer in its metadata: :data:`SAFETENSORS_METADATA`), enough to sample from.
"""

from __future__ import annotations

import json
import os
import pickle
import re
from pathlib import Path

import torch

from .config import GPTConfig, check_model_sizes
from .errors import CheckpointError
from .model import GPT
from .tokenizer import Tokenizer

CHECKPOINT_VERSION = 1
#: A checkpoint's parts kept as JSON text in an exported ``.safetensors`` file's metadata, beside the weights.
SAFETENSORS_METADATA = ("model_config", "tokenizer", "train_config", "step", "best_val_loss")
SAFETENSORS_FORMAT = "tinygpt"


def save_checkpoint(path: Path, state: dict) -> None:
    """Write atomically: a temporary file in the same folder, fsync, then rename.

    A write that fails (a full disk, say) removes the temporary file, leaves the checkpoint
    already under ``path`` as it was, and raises :class:`CheckpointError` naming the cause.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save({"version": CHECKPOINT_VERSION, **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as exc:  # torch reports a failed write as RuntimeError
        tmp.unlink(missing_ok=True)
        cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CheckpointError(f"could not write checkpoint {path}: {cause}") from exc


def safetensors_parts(state: dict) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The weights (a tied head once, as ``tok_emb.weight``) and the metadata of a checkpoint as an exported
    ``.safetensors`` file holds them; :func:`read_safetensors` reads them back."""
    tied = not state["model_config"].get("untied_head", False)
    weights = {k: v for k, v in state["model"].items() if not (tied and k == "head.weight")}
    metadata = {key: json.dumps(state.get(key)) for key in SAFETENSORS_METADATA}
    return weights, {"format": SAFETENSORS_FORMAT, **metadata}


def is_safetensors(path: Path) -> bool:
    """Told by the content, whatever the name (an upload's is a temporary one): a safetensors file begins with
    its header's length (8 bytes) and the header's JSON object; a torch file is a zip (``PK``) or a pickle."""
    with open(path, "rb") as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{"


def read_safetensors(path: Path, map_location: str | torch.device = "cpu") -> dict:
    """An exported ``.safetensors`` file as a checkpoint's state (no optimizer: enough to sample, not to resume).
    Safetensors holds tensors only, so nothing in it runs; its metadata is checked like any checkpoint's."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt", device=str(map_location)) as f:
            metadata = f.metadata() or {}
            if metadata.get("format") != SAFETENSORS_FORMAT:
                raise CheckpointError(f"{path} is a safetensors file without tinygpt's metadata (format "
                                      f"{metadata.get('format')!r}); export it with `tinygpt export --format safetensors`")
            weights = {name: f.get_tensor(name) for name in f.keys()}
        state = {key: json.loads(metadata[key]) for key in SAFETENSORS_METADATA}
    except (SafetensorError, OSError, KeyError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is not a readable tinygpt safetensors file ({type(exc).__name__}: "
                              f"{str(exc)[:200]})") from None
    if not isinstance(state["model_config"], dict):
        raise CheckpointError(f"{path}: its model_config metadata is not an object")
    if "head.weight" not in weights and "tok_emb.weight" in weights and not state["model_config"].get("untied_head"):
        weights["head.weight"] = weights["tok_emb.weight"]  # the tied head, stored once
    return {"version": CHECKPOINT_VERSION, **state, "model": weights}


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    if is_safetensors(path):
        return read_safetensors(path, map_location)
    try:
        # weights_only: tensors and plain data only. A checkpoint is a pickle, and a full unpickle of a
        # file someone else wrote (a shared run folder, a downloaded best.pt) would run its code.
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"(?i)unsupported global:? (?:GLOBAL )?([\w.]+)", str(exc))
        if found is None:  # not a torch file of tensors at all (random bytes, a bare pickle): never executed
            raise CheckpointError(f"{path} is not a readable checkpoint (not a PyTorch file of tensors and plain "
                                  "data)") from None
        raise CheckpointError(f"{path} was refused: it holds objects other than tensors and plain data "
                              f"({found.group(1)[:100]}), and loading it could run code") from None
    except Exception as exc:  # torch raises many kinds for a damaged file
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        raise CheckpointError(f"{path} is not a readable checkpoint ({type(exc).__name__}: {first})") from None
    if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"{path} is not a tinygpt checkpoint of version {CHECKPOINT_VERSION}")
    return state


def load_model(path: str | Path, device: str | torch.device = "cpu") -> tuple[GPT, Tokenizer, dict]:
    """Rebuild the model (in eval mode, on ``device``) and tokenizer stored in a checkpoint, once
    :func:`checked_parts` has bounded every part of it (nothing is built from an unchecked size).

    >>> model, tokenizer, state = load_model("runs/holmes/best.pt")  # doctest: +SKIP
    >>> state["step"], state["best_val_loss"]  # doctest: +SKIP
    (1250, 3.86)
    """
    state = read_checkpoint(path)
    config, tokenizer = checked_parts(state, Path(path))
    return built_model(config, state["model"], device), tokenizer, state


def built_model(config: GPTConfig, weights: dict[str, torch.Tensor], device: str | torch.device = "cpu") -> GPT:
    """The model of checked parts (:func:`checked_parts`) with these weights, in eval mode on ``device``."""
    model = GPT(config)
    model.load_state_dict(weights)
    return model.to(device).eval()


def verify_checkpoint(path: str | Path) -> dict:
    """Check that ``path`` is a checkpoint this library can load (:func:`checked_parts`), without
    building the model in memory. Returns its state; CheckpointError otherwise."""
    state = read_checkpoint(path)
    checked_parts(state, Path(path))
    return state


def checked_parts(state: dict, path: Path) -> tuple[GPTConfig, Tokenizer]:
    """A checkpoint's model config and tokenizer, each bounded before it is built (a forged file could ask
    for any size): tensors and plain data only (``weights_only``, read before); model sizes within the run
    options' bounds (:data:`~tinygpt.config.SIZE_BOUNDS`); weights whose names and shapes are that model's
    (checked on the ``meta`` device, which allocates nothing); a tokenizer whose merges and tokens are
    bounded (:data:`~tinygpt.tokenizer.MAX_TOKEN_BYTES`) with no more ids than the model's vocabulary.
    CheckpointError naming what is wrong otherwise."""
    try:
        config = GPTConfig.from_dict(state["model_config"])
        check_model_sizes(config)
        with torch.device("meta"):
            model = GPT(config)
        model.load_state_dict(state["model"], strict=True, assign=True)
        tokenizer = Tokenizer.from_dict(state["tokenizer"], source="the checkpoint's tokenizer")
        if tokenizer.vocab_size > config.vocab_size:
            raise ValueError(f"the tokenizer has {tokenizer.vocab_size} ids but the model's vocabulary is "
                             f"{config.vocab_size}")
    except Exception as exc:  # a missing key, a wrong shape, a bad size or tokenizer: all say "not loadable"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path.name} is not a checkpoint of a tinygpt model ({type(exc).__name__}: "
                              f"{first[:300]})") from None
    return config, tokenizer
