"""The numbers of a run's Inside view (``GET /api/runs/{id}/inside``): one forward pass of the run's model over a
passage, through ``tinygpt.inside`` (the library computes; this shapes the answer). Bounded as sampling is: the
passage at most the model's context, the model loaded through the app's model cache (its checks and load
limits). Every head's attention comes as bytes (each probability x 255, rounded: the heatmaps' resolution) so
that the holmes model's 6 x 6 heads over 256 tokens is 2.4 MB, not a JSON array of 2.4 million numbers; one
head asked for by ``layer`` and ``head`` comes in full precision."""

from __future__ import annotations

import base64
import threading

from ..errors import Invalid

MAX_TEXT_CHARS = 20_000
_forward = threading.Semaphore(1)  # one forward pass at a time, as generation is


def pieces(tokenizer, ids: list[int]) -> list[dict]:  # noqa: ANN001 (tinygpt's Tokenizer: torch loaded lazily)
    """Each token's text and whether it starts a word (a piece after another without a leading space or
    punctuation continues the word the tokenizer split)."""
    out = []
    for i, token in enumerate(ids):
        text = tokenizer.token_bytes(token).decode("utf-8", errors="replace")
        starts = i == 0 or not text[:1].isalnum() or not out[-1]["text"][-1:].isalnum()
        out.append({"id": token, "text": text, "word_start": starts})
    return out


def inside_of(model, tokenizer, *, text: str, layer: int | None = None, head: int | None = None) -> dict:  # noqa: ANN001
    """The Inside view's numbers for ``text`` (see the module docstring)."""
    import torch

    from tinygpt.inside import bits, head_scores, look_inside

    ids = tokenizer.encode(text)
    context = model.config.context
    if not 2 <= len(ids) <= context:
        raise Invalid(f"text is {len(ids)} tokens; a passage is 2 to {context} (the model's context)", field="text")
    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    if (layer is None) != (head is None):
        raise Invalid("layer and head come together (one head's full attention)", field="layer" if layer is None else "head")
    if layer is not None and not (0 <= layer < n_layers and 0 <= head < n_heads):
        raise Invalid(f"the model has layers 0-{n_layers - 1} and heads 0-{n_heads - 1}",
                      field="layer" if not 0 <= layer < n_layers else "head")
    with _forward:
        seen = look_inside(model, torch.tensor(ids))
        scores = head_scores(model, vocab_size=tokenizer.vocab_size)
    quantised = (seen.attention * 255).round().to(torch.uint8)  # (L, H, T, T)
    n_bytes = len(tokenizer.decode_bytes(ids[1:]))
    as_piece = lambda token: tokenizer.token_bytes(int(token)).decode("utf-8", errors="replace")  # noqa: E731
    return {
        "tokens": pieces(tokenizer, ids),
        "layers": n_layers, "heads": n_heads,
        "token_loss": [round(float(v), 6) for v in seen.token_loss],
        "mean_loss": seen.mean_loss, "mean_loss_bits": bits(seen.mean_loss),
        "bits_per_byte": bits(float(seen.token_loss.sum())) / max(n_bytes, 1),
        "top": [[{"text": as_piece(t), "id": int(t), "prob": round(float(p), 6)} for t, p in zip(ti, tp, strict=True)]
                for ti, tp in zip(seen.top_ids, seen.top_probs, strict=True)],
        "lens": {"top": [[as_piece(t) for t in row] for row in seen.lens_top],
                 "next_prob": [[round(float(p), 6) for p in row] for row in seen.lens_next_prob],
                 "rows": ["embeddings", *(f"after block {i}" for i in range(n_layers))]},
        "attention_u8": base64.b64encode(quantised.numpy().tobytes()).decode(),
        "attention_shape": list(quantised.shape),
        "attention": None if layer is None else [[round(float(p), 6) for p in row] for row in seen.attention[layer, head]],
        "head_scores": {name: [[round(float(v), 6) for v in row] for row in values] for name, values in scores.items()},
    }
