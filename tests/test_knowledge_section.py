"""The report's "Knowledge and geometry" section on a tiny masked LM (every part runs), and one MiniLM
integration check of the documented findings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from knowledge_models import save_tiny_mlm, write_toy_corpus  # noqa: E402


def test_section_on_a_tiny_masked_lm(tmp_path):
    from bertology.knowledge.section import knowledge_section

    model = save_tiny_mlm(tmp_path / "tiny-mlm")
    corpus = write_toy_corpus(tmp_path / "toy.txt")
    lama_folder = tmp_path / "lama"
    (lama_folder / "TREx").mkdir(parents=True)
    (lama_folder / "relations.jsonl").write_text(json.dumps({"relation": "P19", "template": "[X] was born in [Y] ."})
                                                 + "\n", encoding="utf-8")
    (lama_folder / "TREx" / "P19.jsonl").write_text(json.dumps({"sub_label": "she", "obj_label": "zurich"}) + "\n",
                                                    encoding="utf-8")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"sentence_good": "Dogs chase cats .", "sentence_bad": "Dogs chases cats ."}) + "\n",
                     encoding="utf-8")
    section = knowledge_section(str(model), tmp_path / "out", data=corpus, max_sentences=32, mlm_probe_sentences=32,
                                lama_data=lama_folder, pairs_data=pairs, device="cpu", cache_dir=tmp_path / "cache")
    assert set(section.results) == {"contextuality", "static", "mlm_probe", "lama", "pairs"}
    assert (tmp_path / "out" / "lama" / "corpora.parquet").is_file()
    # What the report shows is built in bertology.report.knowledge, from the Results alone, also after the
    # report cache's round trip through one bundled Result.
    from bertology.report.knowledge import bundle, display_notes, display_tables, draw_figures, unbundle
    from bertology.results import Result

    cached = Result.load(bundle(section.results, section.notes, section.settings).save(tmp_path / "cached"))
    results = unbundle(cached)
    assert list(results) == list(section.results)
    assert results["lama"].meta == section.results["lama"].meta
    tables = display_tables(results, cached.meta["settings"])
    assert len(tables) == 5 and all(len(t) for t in tables.values())
    fresh = display_tables(section.results, section.settings)
    assert list(tables) == list(fresh) and all(tables[k].equals(fresh[k]) for k in fresh), "the same after caching"
    assert any(k.startswith("LAMA (50 facts") for k in tables)
    contextuality = next(t for k, t in tables.items() if k.startswith("Contextuality"))
    assert list(contextuality["layer"]) == [0, 1, 2]
    assert all(cell.count(".") == 1 for cell in contextuality["anisotropy"]), "formatted for display"
    figures = draw_figures(results, tmp_path / "figures", "tiny")
    assert all(Path(p).is_file() for p in figures.values()) and len(figures) == 3
    notes = display_notes(results, cached.meta["settings"], cached.meta["notes"])
    assert notes[0].startswith("Static similarity (a)") and notes[1].startswith("MLM probe: ")


@pytest.mark.integration
def test_minilm_geometry_findings(minilm, tmp_path):
    """The findings docs/knowledge.md reports, on 300 EWT dev sentences: later layers are less self-similar
    (adjusted), and the last layer is the furthest from the input embeddings (no U shape)."""
    from bertology.geometry import contextuality
    from bertology.knowledge import static_similarity

    context = contextuality(minilm, max_sentences=300, seeds=(0,), untrained=False, samples=300, device="cpu",
                            cache_dir=tmp_path)["summary"]
    self_sim = context[context["measure"] == "self_similarity"].set_index("layer")["adjusted"]
    assert self_sim[0] > self_sim[3] > self_sim[5]
    static = static_similarity(minilm, max_sentences=300, seeds=(0,), untrained=False, device="cpu",
                               cache_dir=tmp_path)
    curve = static["summary"].query("reference == 'input_embedding'").set_index("layer")["adjusted"]
    assert curve.idxmax() == 0 and curve.idxmin() == 6
    assert not static.meta["u_shape"]["input_embedding"]["u_shape"]
