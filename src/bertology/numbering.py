"""One numbering for layers and heads, used by every table, figure, API argument, CLI option and doc.

* **Layer** ``l`` is ``hidden_states[l]``: ``0`` is the embedding output, ``1..L`` the transformer layers.
  The attention maps of layer ``l`` are ``attentions[l - 1]``; masking a head "in layer ``l``" changes the
  output of ``hidden_states[l]``. Layer 0 has no heads and cannot be dropped.
* **Head** ``h`` counts from ``0`` within its layer.
* **Label**: ``L{layer}H{head}``, e.g. ``L4H5`` (head 5 of the fourth transformer layer). Tables keep
  ``layer`` and ``head`` as integer columns and add a ``head_label`` column where heads are listed; every
  option that takes heads accepts the label verbatim, and every option that takes layers accepts the
  integer a table prints (or ``L4``).

Module indices (``encoder.layer[l - 1]``) are computed in one place only, the hook layer
(:mod:`bertology.intervention.hooks`).
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping, Sequence

from bertology.errors import SettingError

#: A parsed head list: ``(layer, head)``; ``head is None`` stands for every head of that layer.
HeadPair = tuple[int, "int | None"]
HeadSpec = str | Iterable[tuple[int, int]] | Mapping[int, Iterable[int]]

_HEAD_RE = re.compile(r"^[Ll](\d+)(?:[Hh](\d+|\*))?$")
_LAYER_RE = re.compile(r"^[Ll]?(\d+)$")
_RANGE_RE = re.compile(r"^[Ll]?(\d+)\s*-\s*[Ll]?(\d+)$")

HEAD_FORMAT_HELP = "L<layer>H<head>, e.g. L4H5 (layer 1..L as in hidden_states, head from 0); L4 = every head of layer 4"


def head_label(layer: int, head: int) -> str:
    """``L4H5``: the one printed form of a head."""
    return f"L{int(layer)}H{int(head)}"


def heads_text(pairs: Iterable[tuple[int, int]]) -> str:
    """A comma-separated list of labels, accepted verbatim by ``--heads``."""
    return ",".join(head_label(layer, head) for layer, head in sorted(pairs))


def parse_layers(
    spec: str | int | Iterable[int] | None,
    num_layers: int | None = None,
    *,
    transformer_only: bool = False,
    option: str = "layers",
) -> list[int] | None:
    """Layers in the one numbering: ``None``/``"all"`` (every layer: returns None), ``"0,3,6"``, ``"1-4"``,
    ``"L3"``, ``"last"``, an int or a list of ints. Sorted, unique.

    With ``num_layers`` (L, the transformer layers) every layer is checked to be in ``0..L`` (``1..L``
    with ``transformer_only``, for options that act on heads or blocks). Raises :class:`UsageError`
    naming ``option`` for anything else: negative numbers, reversed ranges, an empty list.
    """
    if spec is None or (isinstance(spec, str) and spec.strip().lower() == "all"):
        return None
    low = 1 if transformer_only else 0
    span = f"{low}-{num_layers}" if num_layers is not None else ("1-L" if transformer_only else "0-L")
    expected = f"expected layers {span} as 0,3,6, 1-4, L3, last or all (0 = embeddings)"
    layers: list[int] = []
    if isinstance(spec, (int,)) and not isinstance(spec, bool):
        items: list = [spec]
    elif isinstance(spec, str):
        items = [part.strip() for part in spec.split(",")]
    else:
        items = list(spec)
    for item in items:
        if isinstance(item, str):
            if not item:
                raise SettingError(option, spec, f"empty item; {expected}")
            if item.lower() == "last":
                if num_layers is None:
                    raise SettingError(option, spec, "'last' needs the model's depth")
                layers.append(num_layers)
                continue
            single, ranged = _LAYER_RE.match(item), _RANGE_RE.match(item)
            if single:
                layers.append(int(single.group(1)))
            elif ranged:
                lo, hi = int(ranged.group(1)), int(ranged.group(2))
                if lo > hi:
                    raise SettingError(option, spec, f"range {item!r} runs backwards; write {hi}-{lo}")
                layers.extend(range(lo, hi + 1))
            else:
                raise SettingError(option, spec, f"{item!r} is not a layer; {expected}")
        else:
            try:
                value = int(item)
            except (TypeError, ValueError):
                raise SettingError(option, None, f"{item!r} is not a layer; {expected}", shown="") from None
            if isinstance(item, bool) or value != item or value < 0:
                raise SettingError(option, None, f"{item!r} is not a layer; {expected}", shown="")
            layers.append(value)
    if not layers:
        raise SettingError(option, spec, f"no layers given; {expected}")
    for layer in layers:
        if layer < low or (num_layers is not None and layer > num_layers):
            what = "layer 0 is the embeddings, which have no heads and no block" if layer == 0 and transformer_only \
                else f"layer {layer} is out of range"
            raise SettingError(option, spec, f"{what}; {expected}")
    return sorted(set(layers))


def parse_heads(
    spec: HeadSpec,
    num_layers: int | None = None,
    num_heads: int | None = None,
    *,
    option: str = "heads",
) -> list[tuple[int, int]] | list[HeadPair]:
    """Heads in the one numbering, sorted and unique.

    ``spec`` is a string of labels (``"L4H5,L3H0"``, ``"L4"`` or ``"L4H*"`` for a whole layer), a list of
    ``(layer, head)`` pairs or a mapping ``{layer: [heads]}``. With ``num_layers`` and ``num_heads`` each
    head is checked and whole layers are expanded; without them a whole layer is ``(layer, None)``.
    Raises :class:`UsageError` naming ``option``, e.g. for the old ``3-5`` form or an empty list.
    """
    pairs: list[HeadPair] = []
    if isinstance(spec, str):
        items = [part.strip() for part in spec.split(",")]
        if not any(items):
            raise SettingError(option, spec, f"no heads given; expected {HEAD_FORMAT_HELP}")
        for item in items:
            match = _HEAD_RE.match(item)
            if not item or not match:
                raise SettingError(option, spec, f"{item!r} is not a head; expected {HEAD_FORMAT_HELP}")
            head = match.group(2)
            pairs.append((int(match.group(1)), None if head in (None, "*") else int(head)))
    elif isinstance(spec, Mapping):
        for layer, heads in spec.items():
            pairs.extend((_as_int(layer, option), _as_int(h, option)) for h in heads)
    else:
        for item in spec:
            try:
                layer, head = item
            except (TypeError, ValueError):
                raise SettingError(option, None, f"{item!r} is not a (layer, head) pair", shown="") from None
            pairs.append((_as_int(layer, option), None if head is None else _as_int(head, option)))
    if not pairs:
        raise SettingError(option, None, f"no heads given; expected {HEAD_FORMAT_HELP}", shown="")
    out: set[HeadPair] = set()
    for layer, head in pairs:
        if layer < 1 or (num_layers is not None and layer > num_layers):
            top = num_layers if num_layers is not None else "L"
            raise SettingError(option, None, f"layer {layer} has no heads; heads live in layers 1-{top} "
                             f"(0 is the embeddings); expected {HEAD_FORMAT_HELP}", shown="")
        if head is not None and (head < 0 or (num_heads is not None and head >= num_heads)):
            raise SettingError(option, None, f"head {head_label(layer, head)} is out of range; this model has heads "
                             f"0-{(num_heads or 0) - 1} in each layer", shown="")
        if head is None and num_heads is not None:
            out.update((layer, h) for h in range(num_heads))
        else:
            out.add((layer, head))
    return sorted(out, key=lambda pair: (pair[0], -1 if pair[1] is None else pair[1]))


def _as_int(value, option: str) -> int:
    if isinstance(value, bool):
        raise SettingError(option, None, f"{value!r} is not an integer", shown="")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise SettingError(option, None, f"{value!r} is not an integer", shown="") from None
    if number != value and not isinstance(value, str):
        raise SettingError(option, None, f"{value!r} is not an integer", shown="")
    return number


def transformer_layers(num_layers: int) -> Sequence[int]:
    """``1..L``: the layers that have heads and blocks."""
    return range(1, num_layers + 1)
