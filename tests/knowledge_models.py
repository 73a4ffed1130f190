"""Tiny models and corpora built in code for the knowledge and geometry tests (no network, no hub)."""

from __future__ import annotations

from pathlib import Path


def save_tiny_encoder(folder: Path, seed: int = 0) -> Path:
    """The tiny random BERT encoder with its tokenizer, saved as a model folder."""
    from bertology.models.tiny import tiny_encoder

    encoder = tiny_encoder("bert", seed=seed, attentions=False)
    encoder.model.save_pretrained(folder)
    encoder.tokenizer.save_pretrained(folder)
    return folder


def write_toy_corpus(path: Path) -> Path:
    """The tiny tokenizer's training sentences (4 x 8 sentences), one a line."""
    from bertology.models.tiny import training_corpus

    path.write_text("\n".join(training_corpus()) + "\n", encoding="utf-8")
    return path


CAPITALS = [("paris", "france"), ("berlin", "germany"), ("rome", "italy"), ("madrid", "spain"),
            ("lisbon", "portugal"), ("vienna", "austria"), ("athens", "greece"), ("dublin", "ireland"),
            ("oslo", "norway"), ("warsaw", "poland"), ("prague", "czechia"), ("cairo", "egypt")]
TEMPLATE = "[X] is the capital of [Y] ."


def fact_tokenizer():
    """A WordPiece tokenizer whose vocabulary holds every toy word whole, plus ``ice ##land`` (so
    "iceland" splits into two pieces) and nothing for "atlantis" (unknown)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = sorted({w for pair in CAPITALS for w in pair} | {"is", "the", "capital", "of", ".", "ice", "reykjavik"})
    vocab = {token: index for index, token in enumerate(specials + words + ["##land"])}
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=64)


def train_fact_mlm(steps: int = 300, seed: int = 0):
    """A tiny BERT MLM trained in code (about two seconds on one thread) to complete "[X] is the capital of
    [MASK] ." for the toy capitals; returns (model, tokenizer)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    tokenizer = fact_tokenizer()
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=32, pad_token_id=tokenizer.pad_token_id)
    model = BertForMaskedLM(config)
    sentences = [TEMPLATE.replace("[X]", city).replace("[Y]", tokenizer.mask_token) for city, _ in CAPITALS]
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    labels = torch.full_like(batch["input_ids"], -100)
    masked = batch["input_ids"] == tokenizer.mask_token_id
    labels[masked] = torch.as_tensor(tokenizer.convert_tokens_to_ids([country for _, country in CAPITALS]))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(**batch, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), tokenizer


def save_tiny_mlm(folder, seed: int = 0):
    """A tiny random BERT MLM on the tiny WordPiece tokenizer, saved as a folder (for PLL parity)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    from bertology.models.tiny import tiny_tokenizer

    tokenizer = tiny_tokenizer("bert")
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id)
    model = BertForMaskedLM(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
