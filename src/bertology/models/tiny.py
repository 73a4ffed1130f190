"""Tiny random encoders of several families, with tokenizers trained in code: for tests and examples.

Nothing here touches the network. The three tokenizer kinds of BERT-family models are covered:
WordPiece (BERT), byte-level BPE with leading-space markers (RoBERTa) and SentencePiece-style Unigram
with the metaspace marker (ALBERT, DeBERTa-v2).
"""

from __future__ import annotations

from functools import lru_cache

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoConfig, AutoModel, PreTrainedTokenizerFast

from bertology.models.encoders import Encoder
from bertology.models.families import FAMILIES as REGISTRY
from bertology.models.families import family as family_entry
from bertology.runtime import seeded

#: The families the test suite builds tiny models of (tests/test_family_matrix.py runs every capability on each).
FAMILIES = ("bert", "roberta", "albert", "deberta-v2", "distilbert", "electra", "mpnet", "xlm-roberta", "modernbert")

_CORPUS = [
    "The quick brown fox jumps over the lazy dog .",
    "A café in Zürich served naïve tourists 3.14 pies , 42 cakes and 1,000 coffees !",
    "Antidisestablishmentarianism is a remarkably long word , isn't it ?",
    "She said that the committee would meet on Tuesday at 10:30 .",
    "Researchers probe BERT layers to find syntax , semantics and world knowledge .",
    "Dogs chase cats ; cats chase mice ; mice eat cheese .",
    "I don't think we're ready yet , but they've started already .",
    "Email me at someone@example.com or call +1-555-0100 .",
]


def training_corpus() -> list[str]:
    return list(_CORPUS) * 4


@lru_cache(maxsize=None)
def _tokenizer(kind: str) -> PreTrainedTokenizerFast:
    if kind == "wordpiece":
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.train_from_iterator(training_corpus(), trainers.WordPieceTrainer(vocab_size=300, special_tokens=specials, show_progress=False))
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
        tok.decoder = decoders.WordPiece()
        return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                       cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                       model_max_length=512)
    if kind == "bpe":
        specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tok.train_from_iterator(training_corpus(), trainers.BpeTrainer(
            vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
        tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                          ("<s>", tok.token_to_id("<s>")), trim_offsets=True)
        tok.decoder = decoders.ByteLevel()
        return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                       pad_token="<pad>", cls_token="<s>", sep_token="</s>", mask_token="<mask>",
                                       model_max_length=512)
    if kind == "unigram":
        specials = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.train_from_iterator(training_corpus(), trainers.UnigramTrainer(
            vocab_size=250, special_tokens=specials, unk_token="<unk>", show_progress=False))
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
        tok.decoder = decoders.Metaspace()
        return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                       cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                       model_max_length=512)
    raise ValueError(f"unknown tokenizer kind {kind!r}")


def tiny_tokenizer(family: str) -> PreTrainedTokenizerFast:
    return _tokenizer(family_entry(family).tokenizer)


def _supports_sdpa(config) -> bool:
    """Whether the family's model class has an sdpa path (DeBERTa-v2 and MPNet compute attention themselves)."""
    return bool(getattr(AutoModel._model_mapping[type(config)], "_supports_sdpa", False))


def tiny_encoder(family: str = "bert", seed: int = 0, layers: int = 2, hidden: int = 32, heads: int = 4,
                 max_positions: int = 128, attentions: bool = True) -> Encoder:
    """A tiny randomly initialised encoder of ``family`` (a model type with an entry in
    :mod:`bertology.models.families`) with a tokenizer trained in code."""
    if family not in REGISTRY:
        raise ValueError(f"unknown family {family!r}; expected one of {', '.join(sorted(REGISTRY))} "
                         "(or register it in bertology.models.families)")
    entry = family_entry(family)
    tokenizer = tiny_tokenizer(family)
    common = dict(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                  num_attention_heads=heads, intermediate_size=hidden * 2, max_position_embeddings=max_positions,
                  pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                  eos_token_id=tokenizer.eos_token_id)
    config = AutoConfig.for_model(family, **{**common, **entry.tiny_config(common)})
    implementation = "sdpa" if not attentions and _supports_sdpa(config) else "eager"
    config._attn_implementation = implementation
    with seeded(seed):
        model = AutoModel.from_config(config, attn_implementation=implementation)
    return Encoder.from_model(model.eval(), tokenizer, name=f"tiny-{family}")
