"""A self-contained attention viewer: one HTML file, no CDN, data inlined, fluid at 512 tokens.

bertviz draws every attention line as an SVG node and stalls on long inputs (jessevig/bertviz #82, #121).
Here everything is drawn to ``<canvas>``: the head view batches lines by colour and opacity into a few paths,
and the model view paints each head's map as a downsampled bitmap thumbnail. The weights travel as one
zlib-compressed uint8 array (each head scaled by its own maximum, so faint heads stay visible; the scale is
kept so tooltips show true weights) inside a JSON block, decompressed in the browser with the standard
``DecompressionStream``.

Numbering (:mod:`bertology.numbering`): layers are hidden_states layers (1..L; the maps of layer ``l`` are
``attentions[l - 1]``), heads count from 0; the page names a head ``L4H5`` (layer 4, head 5).
"""

from __future__ import annotations

import base64
import html
import json
import zlib
from pathlib import Path
from typing import Sequence

import jinja2
import numpy as np
import torch

from bertology.data import sentences_from_strings
from bertology.errors import DataError, SettingError, UsageError
from bertology.extraction import encode_sentences, word_groups, word_level_attention
from bertology.extraction.alignment import SentenceTooLong
from bertology.files import write_text

LEVELS = ("word", "subword")


def _template():
    source = (Path(__file__).resolve().parent / "templates" / "attention_view.html.j2").read_text("utf-8")
    env = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined)
    return env.from_string(source)


def encode_attentions(attentions: np.ndarray) -> dict:
    """Quantise ``[L, H, n, n]`` to uint8 per head (scale = that head's max) and compress it."""
    att = np.asarray(attentions, dtype=np.float32)
    scales = att.reshape(att.shape[0], att.shape[1], -1).max(axis=2)
    safe = np.where(scales > 0, scales, 1.0)
    quantised = np.rint(att / safe[:, :, None, None] * 255.0).clip(0, 255).astype(np.uint8)
    payload = zlib.compress(quantised.tobytes(order="C"), level=6)
    return {
        "encoding": "uint8-per-head-max;zlib;base64",
        "scales": [[round(float(v), 6) for v in row] for row in scales],
        "data": base64.b64encode(payload).decode("ascii"),
    }


def render_attention_html(
    tokens: Sequence[str],
    attentions: np.ndarray,
    title: str = "Attention",
    *,
    level: str = "subword",
    model_name: str | None = None,
    layers: Sequence[int] | None = None,
) -> str:
    """The viewer page for one input: ``tokens`` (n) and ``attentions`` ``[n_layers, n_heads, n, n]``.

    ``layers`` names the layers the maps belong to (default 1..n_layers, i.e. every transformer layer);
    the page shows those numbers.
    """
    att = np.asarray(attentions, dtype=np.float32)
    if att.ndim != 4 or att.shape[2] != att.shape[3]:
        raise DataError(f"attentions of shape {tuple(att.shape)}; expected [n_layers, n_heads, n, n]")
    if att.shape[2] != len(tokens):
        raise DataError(f"{len(tokens)} tokens for attention maps over {att.shape[2]} positions")
    if not np.isfinite(att).all():
        raise DataError("attentions contain NaN or infinite values")
    if level not in LEVELS:
        raise DataError(f"level {level!r}; expected one of {', '.join(LEVELS)}")
    layers = list(range(1, att.shape[0] + 1)) if layers is None else [int(layer) for layer in layers]
    if len(layers) != att.shape[0]:
        raise DataError(f"{len(layers)} layer numbers for attention maps of {att.shape[0]} layers")
    payload = {
        "title": title,
        "model": model_name,
        "level": level,
        "tokens": [str(t) for t in tokens],
        "n_layers": int(att.shape[0]),
        "n_heads": int(att.shape[1]),
        "layers": layers,
        **encode_attentions(att),
    }
    # "</" inside inlined JSON would end the <script> element early.
    data = json.dumps(payload, ensure_ascii=True).replace("</", "<\\/")
    return _template().render(title=_html_escape(title), data=data)


def _html_escape(text: str) -> str:
    return html.escape(text, quote=True)


def attention_for_text(encoder, text: str, level: str = "word",
                       layers: Sequence[int] | None = None) -> tuple[list[str], np.ndarray]:
    """Tokens and ``[n_layers, n_heads, n, n]`` attention of one text (``[CLS] ... [SEP]`` included).

    ``level="subword"`` gives the model's own tokens. ``level="word"`` splits ``text`` on whitespace and
    converts the map as Clark et al. (2019) and the spine's store do: attention *to* a word is the sum over
    its subwords, attention *from* a word the mean over its subwords; the leading and trailing special
    tokens each form one group. ``layers`` (transformer layers 1..L, default all) selects the maps; axis 0
    follows them. The model runs through :meth:`bertology.models.Encoder.forward` (``attentions=True``),
    so the encoder's attention implementation is left as it was.
    """
    if level not in LEVELS:
        raise DataError(f"level {level!r}; expected one of {', '.join(LEVELS)}")
    if not text or not text.split():
        raise DataError("empty text; expected at least one word")
    chosen = list(range(1, encoder.num_layers + 1)) if layers is None else [int(layer) for layer in layers]
    bad = [layer for layer in chosen if not 1 <= layer <= encoder.num_layers]
    if bad or not chosen:
        raise DataError(f"layers {bad or chosen}: {encoder.name} has transformer layers 1-{encoder.num_layers}")
    sentence = sentences_from_strings([text])[0]
    try:
        encoded = encode_sentences(encoder.tokenizer, [sentence], max_length=encoder.max_length, long_policy="error")[0]
    except SentenceTooLong:
        raise _too_long(encoder, sentence.words) from None
    segment = encoded.segments[0]
    ids = torch.tensor([segment.input_ids])
    out = encoder.forward({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, hidden_states=False,
                          attentions=True)
    att = torch.stack([out.attention(layer)[0] for layer in chosen]).float().cpu()  # [L, H, T, T]
    if level == "subword":
        return encoder.tokenizer.convert_ids_to_tokens(segment.input_ids), att.numpy()
    words = word_level_attention(att, word_groups(encoded))
    prefix = encoder.tokenizer.convert_ids_to_tokens(segment.input_ids[: encoded.n_prefix])
    suffix = encoder.tokenizer.convert_ids_to_tokens(segment.input_ids[len(segment.input_ids) - encoded.n_suffix:])
    tokens = ["".join(prefix) or "<start>", *sentence.words, "".join(suffix) or "<end>"]
    return tokens, words.numpy()


def _too_long(encoder, words: Sequence[str]) -> UsageError:
    """What the viewer can show instead: one input of the model's length, no sliding window."""
    tokenizer = encoder.tokenizer
    batch = tokenizer([list(words)], is_split_into_words=True, add_special_tokens=False)
    word_ids = batch.word_ids(0)
    capacity = encoder.max_length - tokenizer.num_special_tokens_to_add()
    fits = word_ids[capacity] if capacity < len(word_ids) and word_ids[capacity] is not None else len(words)
    return SettingError("text", None, f"{len(word_ids):,} subword tokens in {len(words):,} words; the viewer shows one "
                        f"input of at most {encoder.max_length} tokens ({capacity} of text; {encoder.name}'s limit) "
                        f"and has no sliding window: shorten the text to its first {fits:,} words or fewer, or view "
                        "it in parts", shown="")


def view_attention(encoder, text: str, level: str = "word", title: str | None = None,
                   layers: Sequence[int] | None = None) -> str:
    """The viewer page for ``text`` run through ``encoder`` (a :class:`bertology.models.Encoder`);
    ``layers`` (default all) selects which layers the page shows."""
    tokens, att = attention_for_text(encoder, text, level, layers=layers)
    name = getattr(encoder, "name", None)
    shown = list(range(1, att.shape[0] + 1)) if layers is None else [int(layer) for layer in layers]
    return render_attention_html(tokens, att, title=title or f"{name or 'model'}: attention ({level} level)",
                                 level=level, model_name=name, layers=shown)


def write_html(html: str, path: str | Path) -> Path:
    """Write the page whole or not at all (world-readable, like every output)."""
    return write_text(path, html)
