"""Which stock class of the Hugging Face and llama.cpp ecosystems holds each architecture: a *family*.

``modern`` (RoPE, RMSNorm, SwiGLU, no biases) is Llama's, ``series`` (RoPE, LayerNorm, GELU) GPT-NeoX's with full
rotary and a sequential residual, ``classic`` (learned positions, LayerNorm, GELU) GPT-2's. GPT-NeoX and GPT-2
always carry biases in their MLP and norms (and GPT-2 in attention): a model of ours without them exports with
those biases zero, which computes the same. A mix no family holds is refused, naming the mix and those that
export.

>>> family_of(GPTConfig(pos="rope", norm="rmsnorm", mlp="swiglu", bias=False)).hf_class
'LlamaForCausalLM'
>>> family_of(GPTConfig(pos="learned", attn_bias=True)).gguf_arch
'gpt2'
>>> family_of(GPTConfig(pos="rope", norm="rmsnorm", mlp="gelu", bias=False))
Traceback (most recent call last):
...
tinygpt.export.families.ExportError: no stock class holds pos rope, norm rmsnorm, mlp gelu; these export: pos rope, norm rmsnorm, mlp swiglu without biases (modern: LlamaForCausalLM, llama.cpp llama); pos rope, norm layernorm, mlp gelu (series: GPTNeoXForCausalLM, llama.cpp gptneox); pos learned, norm layernorm, mlp gelu (classic: GPT2LMHeadModel, llama.cpp gpt2)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import GPTConfig


class ExportError(ValueError):
    """A model a format cannot hold, or a checkpoint that cannot be exported; the message says which."""


@dataclass(frozen=True)
class Family:
    name: str  # transformers' model_type
    hf_class: str  # the class AutoModelForCausalLM builds
    gguf_arch: str  # llama.cpp's architecture name
    pos: str
    norm: str
    mlp: str
    holds_biases: bool  # the stock class has bias vectors (ours absent: written as zeros); False: none allowed
    arch: str  # our architecture preset of this family (tinygpt.presets.ARCHS)

    def text(self) -> str:
        biases = "" if self.holds_biases else " without biases"
        return (f"pos {self.pos}, norm {self.norm}, mlp {self.mlp}{biases} "
                f"({self.arch}: {self.hf_class}, llama.cpp {self.gguf_arch})")


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("llama", "LlamaForCausalLM", "llama", "rope", "rmsnorm", "swiglu", holds_biases=False, arch="modern"),
    Family("gpt_neox", "GPTNeoXForCausalLM", "gptneox", "rope", "layernorm", "gelu", holds_biases=True,
           arch="series"),
    Family("gpt2", "GPT2LMHeadModel", "gpt2", "learned", "layernorm", "gelu", holds_biases=True, arch="classic"),
)}


def exporting_text() -> str:
    return "; ".join(f.text() for f in FAMILIES.values())


def family_of(config: GPTConfig) -> Family:
    """The family whose stock classes hold this model, or ExportError naming the mix and the ones that export."""
    if config.qk_norm:
        raise ExportError("no stock class holds qk_norm (per-head query and key norms without weights); these "
                          f"export: {exporting_text()}")
    biases = config.bias or config.attn_bias
    for family in FAMILIES.values():
        if (family.pos, family.norm, family.mlp) == (config.pos, config.norm, config.mlp):
            if biases and not family.holds_biases:
                break
            return family
    raise ExportError(f"no stock class holds pos {config.pos}, norm {config.norm}, mlp {config.mlp}"
                      f"{' with biases' if biases else ''}; these export: {exporting_text()}")
