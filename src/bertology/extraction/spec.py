"""The extraction settings, written once: :class:`ExtractionSpec`.

The CLI builds one from its options, :func:`~bertology.extraction.extract`, ``plan_extraction`` and the Ray
engine (:func:`bertology.scale.extract_ray`) take one; keyword settings given to them instead
(``extract(encoder, sentences, out, attentions=True)``) are the fields of a spec. Light (no torch), so that
the command line checks its options before the model loads.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from bertology.errors import SettingError, UsageError
from bertology.numbering import parse_layers
from bertology.store.names import DTYPE_NAMES, POOLS, SHARD_TARGET_BYTES

#: With attentions, a sentence of more words than this is refused unless the limit is raised: its maps
#: take ``4 * heads * layers * (words + 2)**2`` bytes (a 2,000-word sentence in MiniLM: 1.15 GB).
MAX_ATTENTION_WORDS = 512
#: A tokenizer that maps more than this share of the corpus' words wholly to its unknown token is refused
#: (a model folder without its tokenizer files loads a 5-token vocabulary and turns every word into [UNK]).
MAX_UNKNOWN_FRACTION = 0.5
LONG_POLICIES = ("window", "error")
#: On a GPU a default shard holds at least this many full batches of the budget in force
#: (:meth:`ExtractionSpec.shard_target`), and weighs at most :data:`SHARD_MAX_BYTES` for it (a shard is held
#: twice in host memory, and once on the device, while it is computed and written).
SHARD_BATCHES = 2
SHARD_MAX_BYTES = 1 << 30


@dataclasses.dataclass(frozen=True)
class ExtractionSpec:
    """What to extract and how; validated (and normalised) when made, so a bad setting is one line before
    anything runs.

    * ``layers``: as :func:`bertology.numbering.parse_layers` reads them (``None``/``"all"``: every layer
      ``0..L``; 0 = embeddings); the range is checked against the model by :meth:`layer_list`.
    * ``pool``: one row per word (``word-mean``/``word-first``/``word-last``), per sentence (``cls``/``mean``)
      or per subword (``tokens``).
    * ``attentions``: also word-level attention maps (float32; not with ``tokens``); a sentence of more than
      ``max_attention_words`` words is refused (``None`` lifts the limit).
    * ``dtype``: storage dtype of the vectors. ``autocast``: ``"bfloat16"`` computes under bf16 autocast
      (dropped when attentions are asked for: bf16 moves attention probabilities by up to 0.02).
    * ``long_policy``: a sentence longer than the model takes is covered by overlapping ``"window"``\\ s, or
      refused (``"error"``).
    * ``batch_tokens`` / ``max_batch``: a batch's padded size and rows at most (:mod:`bertology.models.batching`);
      ``None`` (default): the device's (4,096 tokens and 128 rows on a CPU; on a GPU a share of its free
      memory, :func:`~bertology.models.batching.device_token_budget`). Out of device memory, the budget halves.
    * ``shard_bytes``: what a shard weighs, roughly; ``None`` (default): the store's 48 MiB, and on a GPU
      at least :data:`SHARD_BATCHES` full batches of its budget (:meth:`shard_target`: a shard caps the batches
      cut from it). ``max_unknown_fraction``: refuse a tokenizer that maps
      more than this share of the words wholly to its unknown token (``None`` accepts any).
    """

    layers: str | int | tuple[int, ...] | None = None
    pool: str = "word-mean"
    attentions: bool = False
    dtype: str = "float16"
    autocast: str | None = None
    long_policy: str = "window"
    batch_tokens: int | None = None  # None: the device's (models.batching.device_token_budget)
    max_batch: int | None = None
    shard_bytes: int | None = None  # None: the device's (shard_target)
    max_attention_words: int | None = MAX_ATTENTION_WORDS
    max_unknown_fraction: float | None = MAX_UNKNOWN_FRACTION

    def __post_init__(self) -> None:
        if self.pool not in POOLS:
            raise SettingError("pool", self.pool, f"expected one of {', '.join(POOLS)}")
        if self.dtype not in DTYPE_NAMES:
            raise SettingError("dtype", self.dtype, f"expected one of {', '.join(DTYPE_NAMES)}")
        if self.autocast not in (None, "bfloat16", "bf16"):
            raise SettingError("autocast", self.autocast, "expected None or 'bfloat16'")
        if self.long_policy not in LONG_POLICIES:
            raise SettingError("long_policy", self.long_policy, "expected 'window' or 'error'")
        shard_bytes = SHARD_TARGET_BYTES if self.shard_bytes is None else self.shard_bytes
        sizes = {"batch_tokens": self.batch_tokens, "max_batch": self.max_batch, "shard_bytes": shard_bytes,
                 "max_attention_words": self.max_attention_words}  # None: the default (the device's, no limit)
        for name, value in ((name, value) for name, value in sizes.items() if value is not None):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 1:
                raise SettingError(name, value, "expected a whole number of at least 1")
        if self.attentions and self.pool == "tokens":
            raise SettingError("pool", self.pool, "attentions are stored at word level; use a word pool "
                               "(word-mean/first/last) with them")
        layers = self.layers
        if layers is not None and not isinstance(layers, (str, int)):
            layers = tuple(layers)
        parse_layers(layers, option="layers")  # the spelling now; the range once the model's depth is known
        # attention maps stay float32 (see the class docstring)
        autocast = "bfloat16" if self.autocast and not self.attentions else None
        for name, value in (("layers", layers), ("autocast", autocast), ("attentions", bool(self.attentions)),
                            ("shard_bytes", None if self.shard_bytes is None else int(self.shard_bytes))):
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, spec: "ExtractionSpec | None" = None, **settings) -> "ExtractionSpec":
        """``spec`` (default: the defaults) with ``settings`` (field names) replaced; an unknown name is one
        :class:`UsageError` line listing the fields."""
        unknown = sorted(set(settings) - {field.name for field in dataclasses.fields(cls)})
        if unknown:
            raise UsageError(f"unknown extraction setting(s) {', '.join(unknown)}; expected "
                             f"{', '.join(field.name for field in dataclasses.fields(cls))}")
        if spec is None:
            return cls(**settings)
        if not isinstance(spec, cls):
            raise UsageError(f"spec: expected an ExtractionSpec, got {type(spec).__name__}")
        return dataclasses.replace(spec, **settings) if settings else spec

    def layer_list(self, num_layers: int) -> list[int]:
        """The layers to store for a model of ``num_layers`` transformer layers (0 = embeddings .. L)."""
        chosen = parse_layers(self.layers, num_layers, option="layers")
        return list(range(num_layers + 1)) if chosen is None else chosen

    def attention_layer_list(self, layers: Sequence[int]) -> list[int]:
        """The layers whose attention maps are stored (1..L among ``layers``; none without attentions)."""
        return [layer for layer in layers if layer >= 1] if self.attentions else []

    def shard_target(self, rows: int, bytes_per_row: int) -> int:
        """What a shard weighs: ``shard_bytes`` as given, or by default the store's target
        (:data:`~bertology.store.names.SHARD_TARGET_BYTES`), raised to hold ``rows`` rows of ``bytes_per_row``
        where that is more, up to :data:`SHARD_MAX_BYTES`. Extraction asks, on a GPU, for
        :data:`SHARD_BATCHES` full batches of its token budget (one row per token at most): its batches are cut
        within a shard, and a 48 MiB shard of a bert-base store holds 2,520 words, where a GPU's budget is 8k-64k
        tokens (issue 31)."""
        if self.shard_bytes is not None:
            return self.shard_bytes
        return max(SHARD_TARGET_BYTES, min(SHARD_MAX_BYTES, int(rows) * int(bytes_per_row)))

    def key(self, layers: Sequence[int]) -> dict:
        """The settings a store's index records (and compares on reuse), with the resolved ``layers``."""
        return {"layers": list(layers), "pool": self.pool, "attentions": self.attentions, "dtype": self.dtype,
                "long_policy": self.long_policy, "autocast": self.autocast}
