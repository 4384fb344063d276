"""``GET /api/runs/{id}/export``'s query: the library's formats, number formats and quantizations
(``tinygpt.export``), an unknown parameter refused."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tinygpt.export import DTYPE_NAMES, FORMATS, QUANTS

from .common import InputModel


class ExportQuery(InputModel):
    format: Literal[FORMATS] = Field(description="hf: a zip of a transformers folder with its model card; gguf: "
                                                 "one file for llama.cpp; safetensors: our weights and configs")
    dtype: Literal[DTYPE_NAMES] = Field(default="fp32", description="the weights' number format")
    quant: Literal[QUANTS] | None = Field(default=None, description="gguf only: quantize the 2-D weights")

    @model_validator(mode="after")
    def _quant_is_gguf_only(self) -> ExportQuery:
        if self.quant is not None and self.format != "gguf":
            raise ValueError(f"quant {self.quant} applies to the gguf format only, not {self.format}")
        return self

    def file_name(self, run_id: int) -> str:
        """What the download is called.

        >>> ExportQuery(format="gguf", quant="q8_0").file_name(7), ExportQuery(format="hf").file_name(7)
        ('run-7-q8_0.gguf', 'run-7-transformers-fp32.zip')
        """
        if self.format == "hf":
            return f"run-{run_id}-transformers-{self.dtype}.zip"
        return f"run-{run_id}-{self.quant or self.dtype}.{self.format}"
