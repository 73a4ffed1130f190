"""Display tables of a ``languages`` result (strings, accuracies in percent): the console, the report section and
the stored benchmark all show these, so a number reads the same everywhere."""

from __future__ import annotations

import pandas as pd
from rich.table import Table

from bertology.languages.summary import best_layer
from bertology.languages.figures import retrieval_matrix
from bertology.results import MISSING, Result, percent


def _cell(row) -> str:
    """``83.1 [82.0–84.2]`` (percent, 95% interval)."""
    if row is None:
        return MISSING
    if pd.isna(row.get("ci_low", float("nan"))):
        return percent(row["mean"])
    return f"{percent(row['mean'])} [{percent(row['ci_low'])}–{percent(row['ci_high'])}]"


def _pick(frame: pd.DataFrame, **where):
    rows = frame
    for column, value in where.items():
        rows = rows[rows[column] == value]
    return None if rows.empty else rows.iloc[0]


def identity_table(result: Result) -> pd.DataFrame:
    """Layer x (model, twin, majority): language-identity test accuracy with its interval; the layer chosen on
    dev marked ``*``."""
    summary = result["identity_summary"]
    best = {kind: best_layer(summary, {"baseline": kind}) for kind in ("none", "untrained")}
    rows = []
    for layer in sorted(int(v) for v in summary["layer"].unique()):
        row = {"layer": str(layer)}
        for kind, header in (("none", "model"), ("untrained", "untrained twin"), ("majority", "majority")):
            picked = _pick(summary, baseline=kind, layer=layer, split="test")
            if picked is None and kind == "untrained":
                continue
            row[header] = _cell(picked) + (" *" if best.get(kind) == layer else "")
        rows.append(row)
    return pd.DataFrame(rows)


def retrieval_table(result: Result) -> pd.DataFrame:
    """Layer x (model raw, model centred, twin raw, twin centred): mean retrieval accuracy @1 over language
    pairs on the test queries; the layer chosen on the other queries marked ``*``."""
    summary = result["retrieval_summary"]
    rows = []
    for layer in sorted(int(v) for v in summary["layer"].unique()):
        row = {"layer": str(layer)}
        for kind, name in (("none", "model"), ("untrained", "twin")):
            for centering, label in (("none", "raw"), ("centered", "centred")):
                picked = _pick(summary, baseline=kind, centering=centering, layer=layer)
                if picked is not None:
                    row[f"{name}, {label}"] = _cell(picked) + (" *" if bool(picked["best"]) else "")
        rows.append(row)
    return pd.DataFrame(rows)


def retrieval_matrix_table(result: Result, baseline: str = "none", centering: str = "centered") -> pd.DataFrame:
    """Query language x searched language accuracy @1 (test queries) at the layer chosen on the others."""
    layer, matrix = retrieval_matrix(result, baseline, centering)
    frame = matrix.map(percent)
    frame.index.name = f"query \\ searched (layer {layer})"
    return frame.reset_index()


def transfer_table(result: Result, task: str = "upos") -> pd.DataFrame:
    """Per language: in-language and zero-shot test accuracy, each at the layer chosen on its own dev
    (English dev for zero-shot), the transfer ratio, the twin's and the majority baseline."""
    best = result["transfer_best"]
    best = best[best["task"] == task]
    rows = []
    for code in dict.fromkeys(best["language"]):
        model = _pick(best, language=code, baseline="none")
        twin = _pick(best, language=code, baseline="untrained")
        row = {"language": code}
        for label, source in (("", model), ("twin ", twin)):
            if source is None:
                continue
            row[f"{label}in-language"] = (f"{percent(source['in_language'])} [{percent(source['in_language_ci_low'])}–"
                                          f"{percent(source['in_language_ci_high'])}] (L{source['in_language_layer']})")
            row[f"{label}zero-shot"] = (f"{percent(source['zero_shot'])} [{percent(source['zero_shot_ci_low'])}–"
                                        f"{percent(source['zero_shot_ci_high'])}] (L{source['zero_shot_layer']})")
            row[f"{label}ratio"] = (f"{source['ratio']:.2f} [{source['ratio_ci_low']:.2f}–"
                                    f"{source['ratio_ci_high']:.2f}]")
        row["majority"] = percent(model["majority"]) if model is not None else MISSING
        rows.append(row)
    return pd.DataFrame(rows)


def transfer_layers_table(result: Result, task: str = "upos", baseline: str = "none") -> pd.DataFrame:
    """Language x layer: ``zero-shot / in-language`` test accuracy (percent, mean over seeds)."""
    ratio = result["transfer_ratio"]
    ratio = ratio[(ratio["task"] == task) & (ratio["baseline"] == baseline)]
    rows = []
    for code in dict.fromkeys(ratio["language"]):
        row = {"language": code}
        for _, at in ratio[ratio["language"] == code].sort_values("layer").iterrows():
            row[f"L{int(at['layer'])}"] = f"{percent(at['zero_shot'])} / {percent(at['in_language'])}"
        rows.append(row)
    return pd.DataFrame(rows)


def tokenizer_table(result: Result) -> pd.DataFrame:
    table = result["tokenizer"]
    return pd.DataFrame({
        "language": table["language"], "words": table["words"].map("{:,}".format),
        "subwords per word": table["fertility"].map("{:.2f}".format),
        "words split (%)": table["split_word_share"].map(percent),
        "words [UNK] (%)": table["unk_word_share"].map(percent),
        "subwords [UNK] (%)": table["unk_token_share"].map(percent),
    })


def centroid_table(result: Result, baseline: str = "none", layer: int | None = None) -> pd.DataFrame:
    """Language x language cosine distance between centroids at ``layer`` (default the last)."""
    table = result["centroids"]
    table = table[table["baseline"] == baseline]
    layer = int(table["layer"].max()) if layer is None else layer
    table = table[table["layer"] == layer]
    codes = list(dict.fromkeys(list(table["language_a"]) + list(table["language_b"])))
    grid = pd.DataFrame("", index=codes, columns=codes)
    for _, row in table.iterrows():
        grid.loc[row["language_a"], row["language_b"]] = f"{row['cosine']:.3f}"
        grid.loc[row["language_b"], row["language_a"]] = f"{row['cosine']:.3f}"
    for code in codes:
        grid.loc[code, code] = "0"
    grid.index.name = f"cosine distance (layer {layer})"
    return grid.reset_index()


def tasks_table(result: Result) -> pd.DataFrame:
    """Language x SentEval task: test sentences when built, ``absent`` when its annotation cannot support it."""
    table = result["tasks"]
    grid = table.pivot(index="language", columns="task", values="test").astype(str)
    status = table.pivot(index="language", columns="task", values="status")
    grid = grid.where(status == "built", "absent")
    order = list(dict.fromkeys(table["task"]))
    return grid[order].reset_index()


def display_tables(result: Result) -> dict[str, pd.DataFrame]:
    """Every display table the result supports, by name."""
    tables = {"identity": identity_table(result), "tokenizer": tokenizer_table(result),
              "centroids": centroid_table(result)}
    if "retrieval_summary" in result:
        tables["retrieval"] = retrieval_table(result)
        tables["retrieval_matrix"] = retrieval_matrix_table(result)
        tables["retrieval_matrix_raw"] = retrieval_matrix_table(result, centering="none")
    if "transfer_best" in result and len(result["transfer_best"]):
        for task in dict.fromkeys(result["transfer_best"]["task"]):
            tables[f"transfer_{task}"] = transfer_table(result, task)
            tables[f"transfer_{task}_layers"] = transfer_layers_table(result, task)
    if "tasks" in result:
        tables["tasks"] = tasks_table(result)
    return tables


def console_tables(result: Result) -> list:
    """The display tables as rich tables for the terminal."""
    titles = {"identity": "language identity, test accuracy % [95% CI] (* = layer chosen on dev)",
              "retrieval": "parallel sentence retrieval @1 %, mean over language pairs (* = layer chosen on "
                           "non-test queries)",
              "transfer_upos": "UPOS: in-language vs zero-shot from English (layer chosen on each one's dev)",
              "transfer_deprel": "deprel: in-language vs zero-shot from English",
              "tokenizer": "the tokenizer per language"}
    out = []
    for name, frame in display_tables(result).items():
        if name not in titles:
            continue
        table = Table(title=f"{result.meta['model']}: {titles[name]}")
        for column in frame.columns:
            table.add_column(str(column), justify="left" if column == "language" else "right")
        for row in frame.itertuples(index=False):
            table.add_row(*[str(v) for v in row])
        out.append(table)
    return out
