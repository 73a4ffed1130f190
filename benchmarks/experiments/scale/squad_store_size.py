"""How big is a store of every layer of bert-base over SQuAD 2.0 train (what BERT Vision kept)? Measured on the
windows this project makes (``bertology.readouts.qa.encode_windows``: 384 tokens at most, stride 128) of the SQuAD 2.0
dev subset in the data folder, with MiniLM's tokenizer (the same uncased 30,522-piece WordPiece vocabulary as
bert-base-uncased), then scaled to the official train set's 130,319 questions.

A store keeps one row per token of each window (nothing for padding), so the size follows the tokens a window
really has, not the 384 it may have. The word-pool column counts the rows a word pool would keep instead
(one per word of the question and of the context, plus the three special tokens).

    BERTOLOGY_DATA=../shared/data python -m benchmarks.experiments.scale.squad_store_size   # writes squad_store_size.json
"""

from __future__ import annotations


import numpy as np


from benchmarks.stored import save_run, table  # noqa: E402

from bertology.data.squad import read_squad  # noqa: E402
from bertology.readouts.qa import MAX_LENGTH, encode_windows  # noqa: E402
from bertology.models import load_encoder  # noqa: E402

#: SQuAD 2.0 train (the official file's question count; Rajpurkar et al. 2018, Table 2).
TRAIN_QUESTIONS = 130_319
#: bert-base: embeddings + 12 layers, 768 dimensions, 2 bytes a value (the store's float16; bf16 is also 2).
HIDDEN_STATES, HIDDEN, BYTES = 13, 768, 2
#: Aggregate write bandwidths the job time is given at (GB/s): one NVMe drive to a parallel file system.
WRITE_GBPS = (20, 5, 1)
#: An assumption, not a measurement: H100 SXM dense bf16 peak (NVIDIA's data sheet) and the share of it a
#: 110M-parameter encoder might reach with small batches.
H100_BF16_FLOPS, UTILISATION = 989e12, (0.2, 0.4)


def flops_per_token(mean_tokens: float) -> tuple[float, float]:
    """bert-base's multiply-adds x 2 a token: the layers' matrix products, plus attention's two products over
    a window of ``mean_tokens``. Returns (total, layer parameters)."""
    from transformers import BertConfig

    config = BertConfig()  # bert-base's shapes (no weights)
    h, inner, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    parameters = layers * (4 * h * h + 2 * h * inner)
    return 2 * parameters + layers * 4 * mean_tokens * h, parameters


def word_rows(tokenizer, questions) -> np.ndarray:
    """Rows per window under a word pool: distinct (segment, word) pairs plus the special tokens."""
    from bertology.readouts.qa import MAX_QUESTION_TOKENS, STRIDE, _cut_questions

    texts = _cut_questions(tokenizer, [q.question.lstrip() for q in questions], min(MAX_QUESTION_TOKENS, MAX_LENGTH // 2))
    encoded = tokenizer(texts, [q.context for q in questions], truncation="only_second", max_length=MAX_LENGTH,
                        stride=STRIDE, return_overflowing_tokens=True, padding=False)
    rows = []
    for w in range(len(encoded["input_ids"])):
        words = {(s, word) for s, word in zip(encoded.sequence_ids(w), encoded.word_ids(w)) if s is not None}
        rows.append(len(words) + sum(s is None for s in encoded.sequence_ids(w)))
    return np.asarray(rows)


def main() -> None:
    encoder = load_encoder("minilm")
    questions = read_squad()
    windows = encode_windows(encoder.tokenizer, questions)
    lengths = windows.lengths
    words = word_rows(encoder.tokenizer, questions)
    assert len(words) == len(lengths), "word-pool windows differ from encode_windows'"
    per_question = len(lengths) / len(questions)
    train_windows = TRAIN_QUESTIONS * per_question
    bytes_per_row = HIDDEN_STATES * HIDDEN * BYTES
    token_total = train_windows * lengths.mean() * bytes_per_row
    word_total = train_windows * words.mean() * bytes_per_row
    raw = {"questions": len(questions), "windows": len(lengths), "long_contexts": windows.stats["long_contexts"],
           "windows_per_question": per_question, "mean_tokens_per_window": float(lengths.mean()),
           "median_tokens_per_window": float(np.median(lengths)), "max_tokens_per_window": int(lengths.max()),
           "full_windows": int((lengths == MAX_LENGTH).sum()), "mean_word_rows_per_window": float(words.mean()),
           "tokenizer_vocabulary": len(encoder.tokenizer), "train_questions": TRAIN_QUESTIONS,
           "train_windows": train_windows, "train_tokens": train_windows * lengths.mean(),
           "bytes_per_row": bytes_per_row, "store_bytes_tokens": token_total, "store_bytes_words": word_total,
           "store_bytes_if_384_tokens_a_window": train_windows * MAX_LENGTH * bytes_per_row,
           "job_seconds_at_write_gbps": {gbps: token_total / (gbps * 1e9) for gbps in WRITE_GBPS}}
    measured = table(["", "tokens a window (mean [median, max])", "rows a window, word pool", "windows a question"],
                     [[f"SQuAD 2.0 dev subset ({len(questions):,} questions, {len(lengths):,} windows)",
                       f"{lengths.mean():.0f} [{np.median(lengths):.0f}, {lengths.max()}]", f"{words.mean():.0f}",
                       f"{per_question:.3f}"]])
    projected = table(["SQuAD 2.0 train, bert-base, every layer, float16", "windows", "tokens", "store size"],
                      [[f"`--pool tokens` ({HIDDEN_STATES} x {HIDDEN} x {BYTES} B = {bytes_per_row:,} B a token)",
                        f"{train_windows / 1e3:,.0f}k", f"{raw['train_tokens'] / 1e6:.1f}M",
                        f"**{token_total / 1e9:,.0f} GB**"],
                       ["word pool", f"{train_windows / 1e3:,.0f}k", f"{train_windows * words.mean() / 1e6:.1f}M rows",
                        f"{word_total / 1e9:,.0f} GB"],
                       ["(if every window had 384 tokens, as the earlier estimate assumed)", f"{train_windows / 1e3:,.0f}k",
                        f"{train_windows * MAX_LENGTH / 1e6:.1f}M",
                        f"{raw['store_bytes_if_384_tokens_a_window'] / 1e9:,.0f} GB"]])
    seconds = table(["aggregate write bandwidth", "time to write the token store"],
                    [[f"{gbps} GB/s", f"{value:,.0f} s" if value < 600 else f"{value / 60:,.0f} min"]
                     for gbps, value in raw["job_seconds_at_write_gbps"].items()])
    flops, parameters = flops_per_token(float(lengths.mean()))
    rates = [share * H100_BF16_FLOPS / flops for share in UTILISATION]
    raw.update(flops_per_token=flops, layer_parameters=parameters, assumed_h100_tokens_per_s=rates,
               write_bytes_per_s_at_assumed_rate=[rate * bytes_per_row for rate in rates],
               gpu_seconds_at_assumed_rate=[raw["train_tokens"] / rate for rate in rates])
    low, high = (f"{share:.0%}" for share in UTILISATION)
    paper = table(["on paper (not measured)", "value"], [
        [f"FLOP a token: 2 x {parameters / 1e6:.1f}M layer parameters + attention over {lengths.mean():.0f} tokens",
         f"{flops / 1e6:.0f} MFLOP"],
        [f"one H100 at {low}-{high} of {H100_BF16_FLOPS / 1e12:.0f} TFLOP/s dense bf16 (assumed)",
         f"{rates[0] / 1e6:.1f}-{rates[1] / 1e6:.1f}M tokens/s"],
        ["float16 activations it would produce", f"{rates[0] * bytes_per_row / 1e9:.0f}-"
                                                 f"{rates[1] * bytes_per_row / 1e9:.0f} GB/s"],
        ["GPU time for the whole token store at that rate", f"{raw['gpu_seconds_at_assumed_rate'][1]:.0f}-"
                                                            f"{raw['gpu_seconds_at_assumed_rate'][0]:.0f} s"]])
    save_run("squad_store_size", raw=raw, tables={"windows": measured, "train": projected, "write_time": seconds,
                                                   "paper": paper})


if __name__ == "__main__":
    main()
