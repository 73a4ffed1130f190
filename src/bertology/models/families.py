"""What bertology needs to know about each model family, in one place.

Every family that ``transformers.AutoModel`` loads works if it looks like BERT: WordPiece or SentencePiece
words, absolute positions from 0, and self-attention modules with ``query``/``key``/``value`` projections.
A family that differs says how in ONE :class:`Family` entry here, and nothing else changes:

* ``prefix_space``: byte-level BPE (RoBERTa) needs ``add_prefix_space=True`` for pre-tokenized words;
* ``position_offset``: positions reserved before the first token (RoBERTa starts at ``padding_idx + 1``);
* ``attention_names``: the names of the query, key and value projections inside its attention module,
  which the hook layer (:mod:`bertology.intervention.hooks`) uses to find every head;
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
    attention_names: tuple[str, str, str] = BERT_ATTENTION
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


def attention_name_sets() -> tuple[tuple[str, str, str], ...]:
    """Every known (query, key, value) naming, BERT's first."""
    names = [BERT_ATTENTION] + [f.attention_names for f in FAMILIES.values()]
    return tuple(dict.fromkeys(names))


for _entry in (
    Family("bert"),
    Family("electra", tiny_config=lambda common: {"embedding_size": common["hidden_size"]}),
    Family("roberta", prefix_space=True, position_offset=2, tokenizer="bpe", tiny_config=_roberta_like),
    Family("camembert", prefix_space=True, position_offset=2, tokenizer="bpe", tiny_config=_roberta_like),
    Family("xlm-roberta", prefix_space=True, position_offset=2, tokenizer="bpe", tiny_config=_roberta_like),
    Family("longformer", prefix_space=True, position_offset=2, tokenizer="bpe", tiny_config=_roberta_like),
    Family("albert", tokenizer="unigram", tiny_config=lambda common: {"embedding_size": 16}),
    Family("deberta-v2", attention_names=("query_proj", "key_proj", "value_proj"), tokenizer="unigram",
           tiny_config=lambda common: {"relative_attention": True, "position_buckets": 32,
                                       "max_relative_positions": -1}),
    Family("deberta", prefix_space=True, attention_names=("query_proj", "key_proj", "value_proj"), tokenizer="bpe"),
    Family("distilbert", attention_names=("q_lin", "k_lin", "v_lin"), tiny_config=_distilbert),
    Family("mpnet", attention_names=("q", "k", "v")),
):
    register_family(_entry)
