"""A toy SQuAD 2.0 file that a head on a tiny random encoder can learn: the answer is always the word
"cats", at a random place in a context of other words; unanswerable questions have no "cats"."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

FILLER = ("the quick brown fox jumps over lazy dog she said that committee would meet on tuesday dogs chase "
          "mice eat cheese researchers probe layers to find syntax semantics and world knowledge").split()
ANSWER = "cats"


def toy_squad(path: Path, articles: int = 6, paragraphs: int = 4, questions: int = 4, words: int = 24,
              seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    data, counter = [], 0
    for a in range(articles):
        paras = []
        for p in range(paragraphs):
            context_words = list(rng.choice(FILLER, size=words))
            position = int(rng.integers(0, words))
            with_answer = list(context_words)
            with_answer[position] = ANSWER
            # one paragraph per question keeps every question's context its own
            for q in range(questions):
                counter += 1
                impossible = bool(q % 2)
                paras.append(None)
                context = " ".join(context_words if impossible else with_answer)
                start = -1 if impossible else len(" ".join(with_answer[:position])) + (1 if position else 0)
                qa = {"id": f"q{counter:05d}", "question": "who chase mice ?", "is_impossible": impossible,
                      "answers": [] if impossible else [{"text": ANSWER, "answer_start": start}]}
                paras[-1] = {"context": context, "qas": [qa]}
        data.append({"title": f"Article_{a}", "paragraphs": paras})
    payload = {"version": "v2.0", "data": data}
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            json.dump(payload, handle)
    else:
        path.write_text(json.dumps(payload), encoding="utf-8")
    return path
