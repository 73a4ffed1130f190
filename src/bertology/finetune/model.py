"""A sequence classifier/regressor on top of any BERT-like encoder, with the Convexity variants.

The encoder stays a plain ``transformers`` model (``save_pretrained`` works, and ``load_encoder(checkpoint)``
loads the fine-tuned encoder for probing, attention analysis and ``bertology compare``). The classifiers
(:attr:`GlueModel.classifiers`, one task head per objective layer) live beside it in ``classifiers.safetensors``
(``heads.safetensors`` in checkpoints written before the glossary kept "head" for attention heads; still read).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn
from transformers import AutoTokenizer
from transformers.modeling_outputs import SequenceClassifierOutput

from bertology.errors import ModelError
from bertology.files import atomic_dir, write_json
from bertology.models.encoders import Encoder, load_weights_file
from bertology.models.layout import config_depth, config_hidden
from bertology.finetune.names import CHECKPOINT_META
from bertology.finetune.variants import Variant, apply_variant, parse_variant
from bertology.runtime import resolve_device, seeded
from bertology.models.pruning import load_pruned

CLASSIFIERS_FILE = "classifiers.safetensors"
#: The classifiers' file in checkpoints written before the rename: still read.
OLD_CLASSIFIERS_FILE = "heads.safetensors"


class ClassificationHead(nn.Module):
    """BERT's classification task head: dropout, dense + tanh over [CLS] (the "pooler"), dropout, linear to the
    labels."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.out = nn.Linear(hidden_size, num_labels)

    def forward(self, cls: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(torch.tanh(self.dense(self.dropout(cls)))))


class GlueModel(nn.Module):
    """``backbone`` (a transformers encoder) + ``classifiers``: one :class:`ClassificationHead` per objective layer.

    ``forward`` returns a :class:`SequenceClassifierOutput`: ``logits`` from the top objective layer
    (``[batch, num_labels]``, ``num_labels == 1`` for regression) and, given ``labels``, ``loss``: the mean
    of each classifier's loss (cross-entropy, or mean squared error for regression). ``heads``, the
    classifiers' old name, still works with a :class:`DeprecationWarning` (heads are attention heads).
    """

    def __init__(self, backbone: nn.Module, num_labels: int, variant: Variant | str = "baseline",
                 objective_layers: list[int] | None = None):
        super().__init__()
        self.backbone = backbone
        self.num_labels = num_labels
        self.variant = parse_variant(variant)
        config = backbone.config  # the depth apply_variant left (ALBERT's shared layer has no stack to count)
        self.objective_layers = objective_layers or self.variant.objective_layers(config_depth(config))
        hidden = config_hidden(config)
        dropout = float(getattr(config, "hidden_dropout_prob", None) or getattr(config, "dropout", 0.1) or 0.1)
        std = float(getattr(config, "initializer_range", 0.02))
        self.classifiers = nn.ModuleList(ClassificationHead(hidden, num_labels, dropout)
                                         for _ in self.objective_layers)
        for classifier in self.classifiers:
            for linear in (classifier.dense, classifier.out):
                nn.init.normal_(linear.weight, std=std)
                nn.init.zeros_(linear.bias)
        pooler = getattr(backbone, "pooler", None)
        dense = getattr(pooler, "dense", None)
        if isinstance(dense, nn.Linear) and dense.weight.shape == self.classifiers[-1].dense.weight.shape:
            # Devlin et al.'s recipe classifies the pre-trained pooler's output: start the top classifier from it.
            with torch.no_grad():
                self.classifiers[-1].dense.weight.copy_(dense.weight)
                self.classifiers[-1].dense.bias.copy_(dense.bias)
        # a fine-tuning state saved before the rename (to resume) names them "heads.*"
        self.register_load_state_dict_pre_hook(_old_classifier_keys)

    @property
    def heads(self) -> nn.ModuleList:
        """Deprecated name of :attr:`classifiers` (until the next release)."""
        warnings.warn("GlueModel.heads is deprecated (it goes in the next release); use GlueModel.classifiers",
                      DeprecationWarning, stacklevel=2)
        return self.classifiers

    @property
    def config(self):
        return self.backbone.config

    @property
    def is_regression(self) -> bool:
        return self.num_labels == 1

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None,
                output_attentions: bool = False, output_hidden_states: bool = False, **kwargs):
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, **kwargs}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        # the backbone through the one forward pass; grad=True imposes no inference mode (a caller's stays)
        outputs = Encoder.of(self.backbone).forward(inputs, hidden_states=True, attentions=output_attentions,
                                                    grad=True)
        states = [outputs.hidden_states[layer] for layer in self.objective_layers]  # the last: last_hidden_state
        all_logits = [classifier(state[:, 0]) for classifier, state in zip(self.classifiers, states)]
        loss = None
        if labels is not None:
            losses = [self._loss(logits, labels) for logits in all_logits]
            loss = torch.stack(losses).mean()
        return SequenceClassifierOutput(loss=loss, logits=all_logits[-1],
                                        hidden_states=outputs.hidden_states if output_hidden_states else None,
                                        attentions=outputs.attentions)

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.is_regression:
            return nn.functional.mse_loss(logits.squeeze(-1).float(), labels.float())
        return nn.functional.cross_entropy(logits.float(), labels.long())


def _old_classifier_keys(module, state_dict, prefix, *_) -> None:
    """Rename a state's ``heads.*`` keys (the classifiers' name before the glossary) to ``classifiers.*``."""
    old = prefix + "heads."
    for key in [k for k in state_dict if k.startswith(old)]:
        state_dict[prefix + "classifiers." + key[len(old):]] = state_dict.pop(key)


def build_glue_model(backbone: nn.Module, num_labels: int, variant: Variant | str = "baseline",
                     seed: int = 0) -> GlueModel:
    """Apply ``variant`` to ``backbone`` (in place) and put the classifier(s) on it, initialised from ``seed``."""
    variant = parse_variant(variant)
    apply_variant(backbone, variant, seed=seed)
    with seeded(seed):
        return GlueModel(backbone, num_labels, variant)


def save_checkpoint(model: GlueModel, tokenizer, out_dir: str | Path, meta: dict) -> Path:
    """Write ``model``, ``tokenizer`` and ``meta`` to ``out_dir`` atomically (a temp folder, then a rename)."""
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        model.backbone.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        save_file({k: v.detach().cpu().contiguous() for k, v in model.classifiers.state_dict().items()},
                  str(tmp / CLASSIFIERS_FILE))
        meta = dict(meta, num_labels=model.num_labels, variant=model.variant.name,
                    objective_layers=list(model.objective_layers))
        write_json(tmp / CHECKPOINT_META, meta, indent=2)
    return out_dir


def read_checkpoint_meta(path: str | Path) -> dict:
    """The ``finetune.json`` of a checkpoint; :class:`ModelError` if it is missing or unreadable."""
    meta_path = Path(path) / CHECKPOINT_META
    if not meta_path.is_file():
        raise ModelError(f"{path}: not a bertology fine-tuning checkpoint (no {CHECKPOINT_META})")
    try:
        return json.loads(meta_path.read_text())
    except json.JSONDecodeError as error:
        raise ModelError(f"{meta_path}:{error.lineno}: not valid JSON ({error.msg})") from None


def load_finetuned(path: str | Path, expected_base_fingerprint: str | None = None,
                   device: str | None = None) -> tuple[GlueModel, object, dict]:
    """Load a checkpoint written by :func:`finetune` (or pruned by ``bertology ablate prune``, whose
    smaller shapes are rebuilt): ``(model, tokenizer, meta)``, on ``device`` if given.

    With ``expected_base_fingerprint``, a checkpoint fine-tuned from another base model raises
    :class:`ModelError` (so results of different models are never mixed).
    """
    path = Path(path)
    if not path.is_dir():
        raise ModelError(f"{path}: no such checkpoint folder; expected OUT/<task>/<variant>/seed-<s> "
                         "as written by `bertology finetune`")
    meta = read_checkpoint_meta(path)
    if expected_base_fingerprint is not None and meta.get("base_fingerprint") != expected_base_fingerprint:
        raise ModelError(
            f"{path}: fine-tuned from a model with fingerprint {meta.get('base_fingerprint')!r} "
            f"({meta.get('base_model')!r}), expected {expected_base_fingerprint!r}"
        )
    backbone = load_pruned(path)  # a plain checkpoint, or one whose attention heads `bertology ablate prune` sliced
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = GlueModel(backbone, int(meta["num_labels"]), meta.get("variant", "baseline"),
                      objective_layers=[int(x) for x in meta["objective_layers"]])
    weights = path / CLASSIFIERS_FILE
    if not weights.is_file() and (path / OLD_CLASSIFIERS_FILE).is_file():
        weights = path / OLD_CLASSIFIERS_FILE  # written before the rename
    state = load_weights_file(weights)
    missing, unexpected = model.classifiers.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ModelError(f"{weights}: the classifiers do not match the model (missing {missing}, unexpected "
                         f"{unexpected})")
    model.eval()
    if device is not None:
        model.to(resolve_device(device))
    return model, tokenizer, meta
