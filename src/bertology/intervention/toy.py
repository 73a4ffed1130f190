"""A tiny classifier fine-tuned in seconds on a toy task: the test bed for ablation code without GLUE.

Task: is the marker token present anywhere in a random token sequence? The [CLS] position can only
answer by attending to the marker, so some heads matter and ablating them hurts: a real, if tiny,
fine-tuned model, not a mock.
"""

from __future__ import annotations

import torch
import transformers
from torch import nn

from bertology.models.auto import build_model
from bertology.models.encoders import Encoder
from bertology.runtime import derive_seed, seeded

MARKER = 7
VOCAB = 64
CLS, PAD = 1, 0


def toy_data(n: int, seed: int, length: int = 10) -> dict[str, torch.Tensor]:
    """``n`` labelled examples: [CLS] + random tokens, the marker inserted in half of them; some padded."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, VOCAB, (n, length), generator=generator)
    labels = torch.randint(0, 2, (n,), generator=generator)
    positions = torch.randint(1, length, (n,), generator=generator)
    ids[labels == 1, positions[labels == 1]] = MARKER
    ids[:, 0] = CLS
    lengths = torch.randint(length - 3, length + 1, (n,), generator=generator)
    lengths = torch.maximum(lengths, positions + 1)
    attention_mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    ids = ids.masked_fill(attention_mask == 0, PAD)
    return {"input_ids": ids, "attention_mask": attention_mask, "labels": labels}


def batches(data: dict[str, torch.Tensor], size: int = 32) -> list[dict[str, torch.Tensor]]:
    n = data["labels"].shape[0]
    return [{k: v[i:i + size] for k, v in data.items()} for i in range(0, n, size)]


def toy_classifier(seed: int = 0, model_type: str = "bert", steps: int = 120, num_layers: int = 2,
                   num_heads: int = 4, hidden: int = 32) -> nn.Module:
    """A tiny ``*ForSequenceClassification`` of ``model_type`` trained ``steps`` Adam steps from ``seed``."""
    common = dict(vocab_size=VOCAB, num_labels=2, pad_token_id=PAD)
    if model_type == "distilbert":
        config = transformers.DistilBertConfig(dim=hidden, n_layers=num_layers, n_heads=num_heads,
                                               hidden_dim=2 * hidden, dropout=0.0, attention_dropout=0.0, **common)
    else:
        config = transformers.AutoConfig.for_model(
            model_type, hidden_size=hidden, num_hidden_layers=num_layers, num_attention_heads=num_heads,
            intermediate_size=2 * hidden, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            max_position_embeddings=64, **common)
    with seeded(seed):  # the weights from the seed; the caller's generator is left as it was
        model = build_model(config, head="classification")
        handle = Encoder.of(model, name=f"toy {model_type} classifier")
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        model.train()
        for step in range(steps):
            batch = toy_data(32, seed=derive_seed(seed, "toy batch", step))
            loss = handle.forward(batch, hidden_states=False, grad=True).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


@torch.inference_mode()
def accuracy(model: nn.Module, data: dict[str, torch.Tensor]) -> float:
    inputs = {k: v for k, v in data.items() if k != "labels"}
    logits = Encoder.of(model).forward(inputs, hidden_states=False, logits=True).logits
    return float((logits.argmax(-1) == data["labels"].to(logits.device)).float().mean())
