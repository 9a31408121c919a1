"""The settings of a causal language model (torch-free): where it comes from and which of
its tensors are inferred.

``causal_lm`` is a member of the spec's ``model`` union (:mod:`bayesflow.spec.blocks`); it
reads ``text`` data (:mod:`bayesflow.spec.text`) under the ``next_token`` likelihood, and
:mod:`bayesflow.llm` builds models and problems from these classes.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveInt,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from bayesflow.spec.strict import Strict

__all__ = ["CausalLMSpec", "LoraSpec", "TrainableSpec"]


class LoraSpec(Strict):
    """Low-rank adapters (peft's LoRA) added to some linear layers; only they are inferred."""

    r: PositiveInt = Field(8, description="Rank of each adapter.")
    alpha: float = Field(32.0, gt=0, description="Scaling numerator: an adapter adds (alpha / r) B A x.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "o_proj"],
        min_length=1,
        description="Module names (the last part of a dotted name, as peft reads them) that get "
        "an adapter, e.g. `q_proj` for Llama or `c_attn` for GPT-2.",
    )
    layers: list[int] | None = Field(
        None, description="Indices of the decoder layers that get adapters (negative counts from "
        "the last: -1 is the last layer); omitted or null: every layer (an empty list is refused)."
    )
    dropout: float = Field(
        0.0, ge=0, lt=1,
        description="peft's `lora_dropout` p: dropout on each adapter's input (the adapter adds "
        "(alpha / r) B A dropout(x)). It is on only where a method turns it on: `mc_dropout` "
        "trains with it and leaves it on for its K stochastic passes at prediction; every other "
        "method runs the model in eval mode, dropout off.",
    )

    @field_validator("layers")
    @classmethod
    def _some_layers(cls, layers: list[int] | None) -> list[int] | None:
        # peft reads an empty list as "every layer": refuse it rather than adapt them all.
        if layers == []:
            raise ValueError(
                "an empty list names no layer, yet peft would adapt every layer; omit `layers` "
                "(or write null) for every layer, or list the indices of some, e.g. [-1] for the last"
            )
        return layers


class TrainableSpec(Strict):
    """Which tensors of the model form the state the methods see; every other weight stays
    frozen, held once in the model."""

    lora: LoraSpec | None = Field(None, description="Infer LoRA adapters only.")
    parameters: list[str] | None = Field(
        None, min_length=1,
        description="Glob patterns of parameter names to infer (fnmatch: `*` also matches dots), "
        "e.g. `model.layers.1.*` for a Llama's second decoder layer.",
    )

    @model_validator(mode="after")
    def _one(self) -> TrainableSpec:
        if (self.lora is None) == (self.parameters is None):
            raise ValueError("give exactly one of `lora` or `parameters`")
        return self


# The sizes of a model built from a config (``family``); a folder's come from its config.json
# (with `path` they are ignored, and left out of the model's dump).
SIZES = ("vocab_size", "hidden_size", "intermediate_size", "layers", "heads", "context")


class CausalLMSpec(Strict):
    """A Hugging Face causal language model (the `llm` extra), built from a config (tiny
    models, nothing downloaded) or loaded from a local folder (`path`, never fetched)."""

    name: Literal["causal_lm"] = Field(description="Registry name of the model.")
    ACCEPTS: ClassVar[frozenset[str]] = frozenset({"text_tokens", "choice_prompts"})
    family: Literal["llama", "gpt2"] | None = Field(
        None, description="Architecture of a model built from a config (random weights); "
        "null with `path`."
    )
    path: str | None = Field(
        None, description="A local folder with the model's `config.json`, its weights "
        "(`*.safetensors` or `*.bin`) and tokenizer, relative to the spec file; "
        "`package:NAME` for a folder shipped with bayesflow (`package:lm/checkpoint`); "
        "`models:NAME` for a pretrained model fetched once by `bayesflow models pull NAME` "
        "(`models:smollm2-135m`); or a GGUF file (llama.cpp's format), or a folder holding one, "
        "converted once into the model cache. Read with local_files_only: a run never downloads."
    )
    vocab_size: PositiveInt = Field(256, description="Token ids (config-built models; ignored with `path`, as every size).")
    hidden_size: PositiveInt = Field(32, description="Width of the residual stream.")
    intermediate_size: PositiveInt | None = Field(
        None, description="Width of the MLP (default: 4 × hidden_size)."
    )
    layers: PositiveInt = Field(2, description="Decoder layers.")
    heads: PositiveInt = Field(2, description="Attention heads; must divide hidden_size.")
    context: PositiveInt = Field(128, description="Longest sequence (position embeddings).")
    seed: NonNegativeInt = Field(
        0, description="Seed of a config-built model's random weights: the base model is the "
        "same for every cell's seed (which seeds the chains, as for any model)."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Dtype of the frozen weights; the trainable state stays float32 "
        "and is cast to this dtype in the forward pass."
    )
    attention: Literal["eager"] = Field(
        "eager", description="Attention implementation. Only `eager` batches over chains under "
        "torch.func.vmap (transformers' SDPA path fails there with a batched mask)."
    )
    trainable: TrainableSpec = Field(description="Which tensors are inferred.")

    @field_validator("attention", mode="before")
    @classmethod
    def _eager(cls, value: object) -> object:
        if value != "eager":
            raise ValueError(
                f"attention {value!r} cannot run chains: only `eager` batches under torch.func.vmap "
                "(transformers' SDPA path fails there with a batched attention mask); use eager"
            )
        return value

    @model_serializer(mode="wrap")
    def _without_unused_sizes(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A folder model's dump (the resolved spec, the report, the cache keys) leaves out
        the sizes only a config-built model reads: its own come from its config.json."""
        dumped: dict[str, Any] = handler(self)
        if self.path is not None:
            for key in SIZES:
                dumped.pop(key, None)
        return dumped

    @model_validator(mode="after")
    def _source(self) -> CausalLMSpec:
        if (self.family is None) == (self.path is None):
            raise ValueError("give exactly one of `family` (built from a config) or `path` (a local folder)")
        if self.family is not None and self.hidden_size % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide hidden_size ({self.hidden_size})")
        return self
