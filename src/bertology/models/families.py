"""What bertology needs to know about each model family, in one place.

Every family that ``transformers.AutoModel`` loads works if it looks like BERT: WordPiece or SentencePiece
words, absolute positions from 0, and self-attention modules with ``query``/``key``/``value`` projections.
A family that differs says how in ONE :class:`Family` entry here, and nothing else changes:

* ``prefix_space``: byte-level BPE (RoBERTa) needs ``add_prefix_space=True`` for pre-tokenized words;
* ``position_offset``: positions reserved before the first token (RoBERTa starts at ``padding_idx + 1``);
* ``attention_output``: where each layer's attention output projection sits inside its transformer block.
  Its *input* is the per-head context ``softmax(QK^T) V`` of every head side by side (TransformerLens's
  ``hook_z``), the one hook point where :mod:`bertology.intervention.hooks` masks, scales and measures heads,
  whatever the attention computes (separate or fused q/k/v, relative attention, sdpa, flash);
* ``attention`` and ``attention_names``: the module inside a block that holds the per-head input projections
  and their names, separate ``(query, key, value)`` or one fused projection (ModernBERT's ``Wqkv``): only
  head removal (pruning with smaller shapes) slices them;
* ``head_size_key``: the config key of a head's width when it is not ``hidden_size // heads``;
* ``layers``: where the transformer blocks are, a path with ``*`` for the index of a module list
  (``encoder.layer.*``; ALBERT's one shared layer ``encoder.albert_layer_groups.*.albert_layers.*``), and
  ``depth_key``, ``heads_key``, ``hidden_key``: the config keys of the depth, the heads per layer and the width
  (DistilBERT's ``n_layers``, ``n_heads``, ``dim``); :mod:`bertology.models.layout` reads them;
* ``token_types``: whether the model takes ``token_type_ids`` (ModernBERT has none);
* ``mlm_head``: the modules of its masked-LM model that map hidden states to vocabulary scores, in order, when
  they are not BERT's ``cls`` or RoBERTa's ``lm_head`` (the logit lens applies them to any layer);
* ``prune_refusal``: why heads cannot be removed from this family's shapes (masking them still works);
* ``tokenizer`` and ``tiny_config``: how :func:`bertology.models.tiny.tiny_encoder` builds a tiny random
  model of the family for tests.

``register_family(Family(...))`` adds one at run time (the tests do, to show the recipe).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

#: The projections of a BERT self-attention module.
BERT_ATTENTION = ("query", "key", "value")


@dataclass(frozen=True)
class Family:
    model_type: str
    prefix_space: bool = False
    position_offset: int = 0
    #: path of the attention output projection inside a transformer block (its input is hook_z)
    attention_output: str = "attention.output.dense"
    #: path of the module holding the per-head input projections inside a block
    attention: str = "attention.self"
    #: their names: (query, key, value), or (one fused projection,) laid out [q heads | k heads | v heads]
    attention_names: tuple[str, ...] = BERT_ATTENTION
    head_size_key: str | None = None
    #: the transformer blocks, ``*`` standing for a module list's index (more than one ``*``: layers shared)
    layers: str = "encoder.layer.*"
    depth_key: str = "num_hidden_layers"
    heads_key: str = "num_attention_heads"
    hidden_key: str = "hidden_size"
    token_types: bool = True
    prune_refusal: str | None = None
    mlm_head: tuple[str, ...] = ()
    #: tiny-model tokenizer kind: "wordpiece", "bpe" (byte-level) or "unigram" (SentencePiece-style)
    tokenizer: str = "wordpiece"
    #: extra config keywords for a tiny model, given the common ones (hidden_size, num_hidden_layers...)
    tiny_config: Callable[[dict], dict] = field(default=lambda common: {})


def _roberta_like(common: dict) -> dict:
    return {"max_position_embeddings": common["max_position_embeddings"] + 2}


def _distilbert(common: dict) -> dict:
    return {"dim": common["hidden_size"], "n_layers": common["num_hidden_layers"],
            "n_heads": common["num_attention_heads"], "hidden_dim": common["intermediate_size"]}


FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> Family:
    """Add (or replace) the entry for ``family.model_type``."""
    FAMILIES[family.model_type] = family
    return family


def family(model_type: str) -> Family:
    """The entry for ``model_type``; a BERT-like default for a type with no entry."""
    return FAMILIES.get(model_type) or Family(model_type)


def _modernbert(common: dict) -> dict:
    # alternating global and sliding-window layers as in the released models, with a window (8 tokens) shorter
    # than a test sentence; positions are rotary (RoPE), so no offset and no table to outgrow
    return {"local_attention": 8, "global_attn_every_n_layers": 2, "hidden_activation": "gelu",
            "bos_token_id": None, "eos_token_id": None, "cls_token_id": None, "sep_token_id": None}


for _entry in (
    Family("bert"),
    Family("electra", mlm_head=("generator_predictions", "generator_lm_head"),
           tiny_config=lambda common: {"embedding_size": common["hidden_size"]}),
    Family("roberta", prefix_space=True, position_offset=2, tokenizer="bpe", tiny_config=_roberta_like),
    Family("camembert", prefix_space=True, position_offset=2, tokenizer="bpe", tiny_config=_roberta_like),
    Family("xlm-roberta", prefix_space=True, position_offset=2, tokenizer="bpe", tiny_config=_roberta_like),
    Family("longformer", prefix_space=True, position_offset=2, tokenizer="bpe", tiny_config=_roberta_like),
    Family("albert", attention_output="attention.dense", attention="attention", tokenizer="unigram",
           layers="encoder.albert_layer_groups.*.albert_layers.*",
           mlm_head=("predictions",),
           tiny_config=lambda common: {"embedding_size": 16}),
    Family("deberta-v2", attention_names=("query_proj", "key_proj", "value_proj"), head_size_key="attention_head_size",
           tokenizer="unigram", tiny_config=lambda common: {"relative_attention": True, "position_buckets": 32,
                                                            "max_relative_positions": -1}),
    Family("deberta", prefix_space=True, attention_names=("in_proj",), tokenizer="bpe",
           prune_refusal="its fused in_proj interleaves each head's query, key and value rows and adds q/v biases "
                         "outside it"),
    Family("distilbert", attention_output="attention.out_lin", attention="attention",
           attention_names=("q_lin", "k_lin", "v_lin"), tiny_config=_distilbert,
           layers="transformer.layer.*", depth_key="n_layers", heads_key="n_heads", hidden_key="dim",
           mlm_head=("vocab_transform", "activation", "vocab_layer_norm", "vocab_projector")),
    Family("mpnet", attention_output="attention.attn.o", attention="attention.attn", attention_names=("q", "k", "v"),
           prune_refusal="its relative position bias is one table shared by the heads of every layer"),
    Family("modernbert", attention_output="attn.Wo", attention="attn", attention_names=("Wqkv",),
           head_size_key="head_dim", token_types=False, mlm_head=("head", "decoder"), tiny_config=_modernbert,
           layers="layers.*"),
):
    register_family(_entry)
