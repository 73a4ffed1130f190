"""Build the labelled set of attention maps behind the Kovaleva pattern classifier.

Two steps, with a human (or an annotator looking at images) in between:

    python tools/label_patterns.py sample --work /tmp/patterns_work
        runs MiniLM and its untrained twin on EWT, SST-2, CoLA (single sentences) and RTE, MRPC
        (sentence pairs), draws a stratified random sample of (sentence, layer, head) maps, and writes
        candidates.csv (metadata, rule features, rule label), maps.npz (the full token-level maps) and
        blind contact sheets sheet_XX.png (map ids only, no labels) to label by eye.

    python tools/label_patterns.py build --work /tmp/patterns_work --annotation FILE
        reads the annotator's labels (FILE: one line per sheet row, see docs/attention_patterns.md),
        writes src/bertology/resources/attention_patterns/{maps.npz,labels.csv} with the 32x32 images,
        the blind label, the rule label, the final label and a train/dev/test split grouped by sentence, and
        renders the maps on which annotator and rules disagree (disagree_XX.png) for adjudication.
        Adjudicated labels go in the same FILE as ``map_id=label`` override lines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bertology.attention.pattern_classifiers import PATTERN_TYPES, RulePatternClassifier
from bertology.attention.pattern_features import FEATURE_NAMES, attention_features
from bertology.attention.pattern_maps import resize_map, token_attention_maps
from bertology.data import default_corpus, read_conllu, shared_data_dir
from bertology.files import atomic_path
from bertology.models import load_encoder

RESOURCE_DIR = Path(__file__).resolve().parents[1] / "src" / "bertology" / "resources" / "attention_patterns"
CODES = {"V": "vertical", "D": "diagonal", "M": "vertical+diagonal", "B": "block", "H": "heterogeneous"}
SHEET_ROWS, SHEET_COLS = 4, 8

# (model, source) -> number of sentences; 4 maps (random layer/head) per sentence.
PLAN = {
    ("minilm", "ewt"): 22, ("minilm", "sst2"): 12, ("minilm", "cola"): 10, ("minilm", "rte"): 18,
    ("minilm", "mrpc"): 18,
    ("minilm-untrained", "ewt"): 8, ("minilm-untrained", "sst2"): 4, ("minilm-untrained", "cola"): 4,
    ("minilm-untrained", "rte"): 8, ("minilm-untrained", "mrpc"): 8,
}
MAPS_PER_SENTENCE = 4
TARGETED_SENTENCES, TARGETED_BLOCK, TARGETED_RANDOM = 60, 40, 24


def _texts(source: str, rng: np.random.Generator, count: int) -> list[tuple[str, object]]:
    data = shared_data_dir()
    if source == "ewt":
        sentences = [s for s in read_conllu(default_corpus("ewt-dev")) if 8 <= len(s.words) <= 40]
        picks = rng.choice(len(sentences), size=count, replace=False)
        return [(sentences[i].id, " ".join(sentences[i].words)) for i in picks]
    if source in ("sst2", "cola"):
        path = data / "glue" / source / "dev.tsv"
        frame = pd.read_csv(path, sep="\t", header=0 if source == "sst2" else None, quoting=3)
        column = "sentence" if source == "sst2" else 3
        texts = [t for t in frame[column].astype(str) if 6 <= len(t.split()) <= 40]
        picks = rng.choice(len(texts), size=count, replace=False)
        return [(f"{source}-dev:{i}", texts[i]) for i in picks]
    if source in ("rte", "mrpc"):
        path = data / "glue" / source / "dev.tsv"
        frame = pd.read_csv(path, sep="\t", quoting=3, encoding="utf-8-sig")
        a, b = ("sentence1", "sentence2") if source == "rte" else ("#1 String", "#2 String")
        pairs = [
            (str(x), str(y)) for x, y in zip(frame[a], frame[b]) if len(str(x).split()) + len(str(y).split()) <= 60
        ]
        picks = rng.choice(len(pairs), size=count, replace=False)
        return [(f"{source}-dev:{i}", pairs[i]) for i in picks]
    raise ValueError(source)


def sample(work: Path, seed: int, targeted_seed: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    encoders = {
        "minilm": load_encoder("minilm"),
        "minilm-untrained": load_encoder("minilm", untrained_seed=0),
    }
    rules = RulePatternClassifier()
    rows, maps = [], {}
    texts_by_source = {}
    for (model, source), count in PLAN.items():
        # The trained model and its twin see different sentences, so one sentence never lands in two splits.
        texts = _texts(source, rng, count + 40)
        used = texts_by_source.setdefault(source, set())
        texts = [t for t in texts if t[0] not in used][:count]
        used.update(t[0] for t in texts)
        samples = token_attention_maps(encoders[model], [t for _, t in texts], ids=[i for i, _ in texts],
                                       max_length=128)
        for s in samples:
            feats = attention_features(s)
            n_layers, n_heads = s.attentions.shape[:2]
            picks = rng.choice(n_layers * n_heads, size=MAPS_PER_SENTENCE, replace=False)
            for flat in picks:
                layer, head = divmod(int(flat), n_heads)
                map_id = len(rows)
                boundary = int(np.argmax(s.segments)) if s.segments.max() > 0 else -1
                rows.append({
                    "map_id": map_id, "model": model, "source": source, "sentence_id": s.sentence_id,
                    # layer in the one numbering: the map at axis-0 position k is transformer layer k + 1
                    "layer": layer + 1, "head": head, "n_tokens": s.attentions.shape[-1],
                    "segment_b_start": boundary,
                    "rule_label": rules.predict_features(feats[layer, head][None])[0],
                    **{f"f_{k}": float(v) for k, v in zip(FEATURE_NAMES, feats[layer, head])},
                })
                maps[f"m{map_id}"] = s.attentions[layer, head].astype(np.float16)
    table = pd.DataFrame(rows)
    table["selection"] = "random"
    # Shuffle sheet order so the annotator never sees a run of one model or source.
    table["sheet_position"] = rng.permutation(len(table))
    extra = _targeted(encoders["minilm"], rules, texts_by_source, np.random.default_rng(targeted_seed), len(table),
                      maps)
    table = pd.concat([table, extra], ignore_index=True)
    table.to_csv(work / "candidates.csv", index=False)
    np.savez_compressed(work / "maps.npz", **maps)
    print(table.groupby(["model", "source"]).size())
    print(table["rule_label"].value_counts())
    ordered = table.sort_values("sheet_position")
    render_sheets(ordered, maps, work / "sheet", labels=None)


def _targeted(encoder, rules, texts_by_source, rng, first_id, maps) -> pd.DataFrame:
    """Random sampling finds almost no block heads in MiniLM, so a second round draws pair maps whose rule
    block score is high (TARGETED_BLOCK of them) mixed with as many again random pair maps (TARGETED_RANDOM),
    on sentences not used before, shuffled together so the annotator cannot tell which is which."""
    candidates, randoms = [], []
    for source in ("rte", "mrpc"):
        used = texts_by_source[source]
        texts = [t for t in _texts(source, rng, 160) if t[0] not in used][:TARGETED_SENTENCES]
        used.update(t[0] for t in texts)
        for s in token_attention_maps(encoder, [t for _, t in texts], ids=[i for i, _ in texts]):
            feats = attention_features(s)
            n_layers, n_heads = s.attentions.shape[:2]
            block = feats[..., FEATURE_NAMES.index("block")]
            rest = feats[..., FEATURE_NAMES.index("block_rest")]
            for layer, head in zip(*np.nonzero((block >= 0.4) & (rest >= 0.2))):
                candidates.append((source, s, int(layer), int(head), feats))
            flat = int(rng.integers(n_layers * n_heads))
            randoms.append((source, s, *divmod(flat, n_heads), feats))
    picks = [candidates[i] for i in rng.choice(len(candidates), size=TARGETED_BLOCK, replace=False)]
    picks += [randoms[i] for i in rng.choice(len(randoms), size=TARGETED_RANDOM, replace=False)]
    kinds = ["targeted-block"] * TARGETED_BLOCK + ["targeted-random"] * TARGETED_RANDOM
    rows = []
    for (source, s, layer, head, feats), kind in zip(picks, kinds):
        map_id = first_id + len(rows)
        rows.append({
            "map_id": map_id, "model": "minilm", "source": source, "sentence_id": s.sentence_id,
            "layer": layer + 1, "head": head, "n_tokens": s.attentions.shape[-1],
            "segment_b_start": int(np.argmax(s.segments)),
            "rule_label": rules.predict_features(feats[layer, head][None])[0],
            **{f"f_{k}": float(v) for k, v in zip(FEATURE_NAMES, feats[layer, head])},
            "selection": kind,
        })
        maps[f"m{map_id}"] = s.attentions[layer, head].astype(np.float16)
    extra = pd.DataFrame(rows)
    extra["sheet_position"] = first_id + rng.permutation(len(extra))
    return extra


def render_sheets(table: pd.DataFrame, maps, prefix: Path, labels: dict | None) -> list[Path]:
    import matplotlib.pyplot as plt

    per_sheet = SHEET_ROWS * SHEET_COLS
    paths = []
    for sheet, start in enumerate(range(0, len(table), per_sheet)):
        chunk = table.iloc[start : start + per_sheet]
        fig, axes = plt.subplots(SHEET_ROWS, SHEET_COLS, figsize=(SHEET_COLS * 2.3, SHEET_ROWS * 2.45))
        for ax in axes.flat:
            ax.set_axis_off()
        for ax, (_, row) in zip(axes.flat, chunk.iterrows()):
            a = np.asarray(maps[f"m{row.map_id}"], dtype=np.float32)
            n = a.shape[0]
            # A white margin keeps the first and last columns ([CLS], [SEP]) visible against the frame.
            ax.imshow(a, cmap="Greys", vmin=0, vmax=max(float(a.max()), 1e-6), interpolation="nearest",
                      extent=(-0.5, n - 0.5, n - 0.5, -0.5))
            ax.set_xlim(-1.5, n + 0.5)
            ax.set_ylim(n + 0.5, -1.5)
            title = f"#{row.map_id}"
            if labels is not None:
                title += " " + labels[row.map_id]
            ax.set_title(title, fontsize=8, pad=2)
            ax.set_axis_on()
            for spine in ax.spines.values():
                spine.set_color("#bbbbbb")
            ax.set_xticks([])
            ax.set_yticks([])
            if row.segment_b_start > 0:
                # Ticks outside the map show where sentence B starts, as the annotator of a pair would know.
                ax.set_xticks([row.segment_b_start - 0.5])
                ax.set_yticks([row.segment_b_start - 0.5])
                ax.tick_params(length=3, color="red", labelbottom=False, labelleft=False)
        fig.tight_layout(pad=0.3)
        path = Path(f"{prefix}_{sheet:02d}.png")
        fig.savefig(path, dpi=80)
        plt.close(fig)
        paths.append(path)
    return paths


def read_annotation(path: Path, table: pd.DataFrame) -> tuple[dict[int, str], dict[int, str]]:
    """Blind labels (one line of 8 codes per sheet row, in sheet order) and ``map_id=label`` overrides."""
    ordered = table.sort_values("sheet_position")["map_id"].tolist()
    codes, overrides = [], {}
    for line_no, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" in line:
            key, _, value = line.partition("=")
            value = value.strip()
            label = CODES.get(value, value)
            if label not in PATTERN_TYPES:
                sys.exit(f"{path}:{line_no}: unknown label {value!r}")
            overrides[int(key.strip())] = label
            continue
        row = line.replace(" ", "")
        bad = [c for c in row if c not in CODES]
        if bad:
            sys.exit(f"{path}:{line_no}: unknown code(s) {bad}; expected {''.join(CODES)}")
        codes.extend(row)
    if len(codes) != len(ordered):
        sys.exit(f"{path}: {len(codes)} blind labels for {len(ordered)} maps")
    blind = {map_id: CODES[c] for map_id, c in zip(ordered, codes)}
    return blind, overrides


def build(work: Path, annotation: Path, seed: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    table = pd.read_csv(work / "candidates.csv")
    maps = np.load(work / "maps.npz")
    blind, overrides = read_annotation(annotation, table)
    table["blind_label"] = table["map_id"].map(blind)
    table["label"] = [overrides.get(m, blind[m]) for m in table["map_id"]]
    table["adjudicated"] = table["map_id"].isin(overrides)
    agree = (table["blind_label"] == table["rule_label"]).mean()
    print(f"blind annotator vs rules: {agree:.3f} agreement on {len(table)} maps")
    disagree = table[table["blind_label"] != table["rule_label"]].sort_values("map_id")
    labels = {r.map_id: f"{_code(r.blind_label)}/{_code(r.rule_label)}" for r in disagree.itertuples()}
    render_sheets(disagree, maps, work / "disagree", labels=labels)
    # Split by sentence so that no sentence's maps leak across train/dev/test (60/20/20 of sentences).
    rng = np.random.default_rng(seed)
    keys = table[["model", "sentence_id"]].drop_duplicates().reset_index(drop=True)
    order = rng.permutation(len(keys))
    n_train, n_dev = int(0.6 * len(keys)), int(0.2 * len(keys))
    split = np.empty(len(keys), dtype=object)
    split[order[:n_train]], split[order[n_train:n_train + n_dev]], split[order[n_train + n_dev:]] = (
        "train", "dev", "test")
    keys["split"] = split
    table = table.merge(keys, on=["model", "sentence_id"], how="left")
    images = np.stack([resize_map(np.asarray(maps[f"m{m}"], dtype=np.float32)) for m in table["map_id"]])
    RESOURCE_DIR.mkdir(parents=True, exist_ok=True)
    columns = ["map_id", "model", "source", "sentence_id", "layer", "head", "n_tokens", "segment_b_start",
               "selection", "label", "blind_label", "rule_label", "adjudicated", "split"] + [f"f_{k}" for k in FEATURE_NAMES]
    with atomic_path(RESOURCE_DIR / "labels.csv") as tmp:
        table[columns].to_csv(tmp, index=False, float_format="%.5f")
    with atomic_path(RESOURCE_DIR / "maps.npz") as tmp, open(tmp, "wb") as handle:
        np.savez_compressed(handle, images=images.astype(np.float16))
    print(table.groupby(["split", "label"]).size().unstack(fill_value=0))


def _code(label: str) -> str:
    return {v: k for k, v in CODES.items()}[label]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_sample = sub.add_parser("sample")
    p_sample.add_argument("--work", type=Path, required=True)
    p_sample.add_argument("--seed", type=int, default=2019, help="seed of the random round")
    # The shipped set drew its targeted round from seed 2020; an explicit seed rather than --seed + 1.
    p_sample.add_argument("--targeted-seed", type=int, default=2020, help="seed of the targeted (block) round")
    p_build = sub.add_parser("build")
    p_build.add_argument("--work", type=Path, required=True)
    p_build.add_argument("--annotation", type=Path, required=True)
    p_build.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "sample":
        sample(args.work, args.seed, args.targeted_seed)
    else:
        build(args.work, args.annotation, args.seed)


if __name__ == "__main__":
    main()
