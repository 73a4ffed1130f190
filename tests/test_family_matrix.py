"""The family x capability matrix of docs/models.md, run: every capability on a tiny random model of every
registered family, offline. A cell is ``yes`` (it runs and its numbers are finite) or ``no: <why>`` (it
refuses in one line that says why). The test fails when any documented cell is wrong, and prints the matrix
it measured, ready to paste into docs/models.md, when the two differ.

Each capability here is the library call its commands run (``extract --attentions``, ``attention stats``,
``ablate heads|layers|importance|flagged``, ``compress``, ``knowledge``, ``finetune``, ``readouts``), on two
layers, four heads and a handful of sentences, so the whole matrix takes well under a minute.
"""

from __future__ import annotations

import copy
import re
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch

from bertology.attention.stats import head_statistics
from bertology.compression.methods import compress
from bertology.compression.names import Method
from bertology.data import sentences_from_strings
from bertology.errors import BertologyError
from bertology.extraction import extract
from bertology.finetune.model import build_glue_model
from bertology.intervention import drop_layers, head_contexts, mask_heads, prune_heads, scale_heads
from bertology.models import Encoder
from bertology.models.encoders import untrained_model
from bertology.models.tiny import FAMILIES, tiny_encoder, training_corpus

warnings.filterwarnings("ignore", message="Initializing zero-element tensors")

DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"
LAYERS, HEADS = 2, 4


@lru_cache(maxsize=None)
def _encoder(family: str) -> Encoder:
    return tiny_encoder(family, layers=LAYERS, heads=HEADS)


def _batch(encoder: Encoder) -> dict:
    return dict(encoder.tokenizer(training_corpus()[:3], padding=True, return_tensors="pt"))


def _finite(*arrays) -> None:
    for array in arrays:
        values = array.detach().float().numpy() if isinstance(array, torch.Tensor) else np.asarray(array, float)
        assert np.isfinite(values).all()


def extraction(encoder, tmp_path):
    store = extract(encoder, sentences_from_strings(training_corpus()[:3]), tmp_path / "store", attentions=True,
                    dtype="float32", progress=False)
    _finite(store.layer(LAYERS), store.attention(0))
    np.testing.assert_allclose(store.attention(0).sum(-1), 1.0, atol=1e-4)
    _finite(head_statistics(store).tables["statistics"]["value"])


def masking(encoder, tmp_path):
    model, batch = encoder.model, _batch(encoder)
    plain = encoder.forward(batch).hidden_states
    with mask_heads(model, "L2H1"), head_contexts(model) as contexts:
        masked = encoder.forward(batch).hidden_states
    assert torch.equal(plain[1], masked[1]) and (plain[2] - masked[2]).abs().max() > 1e-5
    assert torch.count_nonzero(contexts[2][..., 1, :]) == 0
    with drop_layers(model, [1]):
        dropped = encoder.forward(batch).hidden_states
    assert torch.equal(dropped[1], dropped[0])


def importance(encoder, tmp_path):
    gates = torch.ones(LAYERS, HEADS, requires_grad=True)
    with scale_heads(encoder.model, gates):
        loss = encoder.forward(_batch(encoder), grad=True).hidden_states[-1].pow(2).mean()
    loss.backward()
    _finite(gates.grad)
    assert gates.grad.abs().min() > 0


def pruning(encoder, tmp_path):
    model, batch = copy.deepcopy(encoder.model), _batch(encoder)
    with mask_heads(model, "L1H2,L2H2"):  # the same head of each layer: ALBERT's layers share theirs
        masked = Encoder.of(model).forward(batch).hidden_states[-1]
    prune_heads(model, "L1H2,L2H2")
    pruned = Encoder.of(model).forward(batch).hidden_states[-1]
    torch.testing.assert_close(pruned, masked, atol=1e-5, rtol=1e-5)


def _compressed(encoder, method: Method):
    _finite(compress(encoder, method).encoder.forward(_batch(encoder)).hidden_states[-1])


def int8(encoder, tmp_path):
    _compressed(encoder, Method("int8-dynamic"))


def drop_top(encoder, tmp_path):
    _compressed(encoder, Method("drop-top", 1))


def masked_lm(encoder, tmp_path):
    mlm = Encoder(model=_with_head(encoder), tokenizer=encoder.tokenizer, name=encoder.name, head="masked-lm")
    out = mlm.forward(_batch(encoder), logits=True)
    assert out.logits.shape[-1] == encoder.config.vocab_size
    _finite(out.logits)


def logit_lens(encoder, tmp_path):
    mlm = Encoder(model=_with_head(encoder), tokenizer=encoder.tokenizer, name=encoder.name, head="masked-lm")
    out = mlm.forward(_batch(encoder), logits=True)
    torch.testing.assert_close(mlm.head_logits(out.hidden_states[-1]), out.logits)  # the head the model applies
    _finite(mlm.head_logits(out.hidden_states[1]))


def _with_head(encoder):
    return untrained_model(encoder.config, 0, attn_implementation=encoder.attention_implementation,
                           head="masked-lm")


def finetuning(encoder, tmp_path):
    glue = build_glue_model(copy.deepcopy(encoder.model), num_labels=2)
    batch = _batch(encoder)
    out = glue(**batch, labels=torch.tensor([0, 1, 0]))
    out.loss.backward()
    _finite(out.logits, out.loss)


#: column -> the capability it runs (the matrix's order)
CAPABILITIES = {
    "extract, attention maps and statistics": extraction,
    "mask heads, drop layers (hook_z)": masking,
    "head importance (gate gradient)": importance,
    "prune heads": pruning,
    "int8 (dynamic)": int8,
    "drop top layers": drop_top,
    "masked LM": masked_lm,
    "MLM head on any layer": logit_lens,
    "fine-tune": finetuning,
}


def measure(family: str, capability: str, tmp_path) -> str:
    try:
        CAPABILITIES[capability](_encoder(family), tmp_path)
    except BertologyError as error:
        message = str(error)
        assert "\n" not in message, f"{family} / {capability}: a refusal must be one line: {message!r}"
        return "no: " + message
    return "yes"


def documented() -> dict[tuple[str, str], str]:
    """The matrix in docs/models.md: ``{(family, capability): "yes" | "no"}``."""
    text = DOC.read_text()
    block = text.split("<!-- matrix:start -->")[1].split("<!-- matrix:end -->")[0]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in block.strip().splitlines()
            if line.startswith("|")]
    header, body = rows[0], rows[2:]
    cells = {}
    for row in body:
        for capability, cell in zip(header[1:], row[1:]):
            cells[(row[0].strip("`"), capability)] = cell
    return cells


def _verdict(cell: str) -> str:
    return "yes" if cell == "yes" else "no"


def test_the_documented_matrix_covers_every_family_and_capability():
    cells = documented()
    assert {family for family, _ in cells} == set(FAMILIES)
    assert {capability for _, capability in cells} == set(CAPABILITIES)
    assert all(re.fullmatch(r"yes|no \(\d\)", cell) for cell in cells.values()), cells


def markdown(measured: dict[tuple[str, str], str]) -> str:
    """The matrix as docs/models.md shows it: ``yes``, or ``no (n)`` with refusal ``n`` quoted below."""
    reasons: list[str] = []
    lines = ["| family | " + " | ".join(CAPABILITIES) + " |", "|---" * (len(CAPABILITIES) + 1) + "|"]
    for family in FAMILIES:
        cells = []
        for capability in CAPABILITIES:
            cell = measured[(family, capability)]
            if cell != "yes":
                reasons.append(f"{family}, {capability}: {cell.removeprefix('no: ')}")
                cell = f"no ({len(reasons)})"
            cells.append(cell)
        lines.append(f"| `{family}` | " + " | ".join(cells) + " |")
    notes = [f"({i}) {reason}" for i, reason in enumerate(reasons, 1)]
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes)


def test_every_cell_of_the_documented_matrix_holds(tmp_path):
    measured = {(f, c): measure(f, c, tmp_path / f"{f}-{len(c)}") for f in FAMILIES for c in CAPABILITIES}
    cells = documented() if "<!-- matrix:start -->" in DOC.read_text() else {}
    wrong = {key: (cells.get(key), got) for key, got in measured.items() if _verdict(cells.get(key, "")) != _verdict(got)}
    if wrong:
        pytest.fail("docs/models.md's matrix is wrong here: " + "; ".join(
            f"{f} / {c}: documented {doc!r}, measured {got!r}" for (f, c), (doc, got) in wrong.items())
            + "\n\nThe matrix measured:\n\n" + markdown(measured))
