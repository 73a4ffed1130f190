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
    assert len(section.tables) == 5 and all(len(t) for t in section.tables.values())
    assert all(Path(p).is_file() for p in section.figures.values()) and len(section.figures) == 3
    assert (tmp_path / "out" / "lama" / "corpora.parquet").is_file()
    contextuality = next(t for k, t in section.tables.items() if k.startswith("Contextuality"))
    assert list(contextuality["layer"]) == [0, 1, 2]


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
