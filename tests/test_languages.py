"""Languages: the measures against hand computations on a few vectors, the treebank rules, and the whole run on a
tiny multilingual BERT whose WordPiece tokenizer is trained here on three PUD languages."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from bertology.errors import DataError
from bertology.languages import measures
from bertology.languages.treebanks import (check_alignment, language_code, read_treebanks, split_ids, tag_problem,
                                           treebank_files)

# ------------------------------------------------------------------------------------------ the measures


def test_centroids_centering_and_distances_by_hand():
    vectors = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 4.0], [0.0, 6.0]])
    labels = ["a", "a", "b", "b", "b"]
    codes, means = measures.centroids(vectors, labels)
    assert codes == ["a", "b"]
    np.testing.assert_allclose(means, [[2.0, 0.0], [0.0, 4.0]])
    np.testing.assert_allclose(measures.center(vectors, labels), [[-1, 0], [1, 0], [0, -2], [0, 0], [0, 2]])
    (row,) = measures.centroid_distances(codes, means)
    assert row["language_a"] == "a" and row["language_b"] == "b"
    assert row["euclidean"] == pytest.approx(np.sqrt(4 + 16))
    assert row["cosine"] == pytest.approx(1.0)  # orthogonal centroids
    with pytest.raises(DataError, match="2 language labels for 5 vectors"):
        measures.centroids(vectors, ["a", "b"])


def test_retrieval_finds_translations_and_centering_undoes_a_language_offset():
    rng = np.random.default_rng(0)
    meaning = rng.normal(size=(30, 16))
    targets = np.arange(30)
    # Same meanings, each language shifted by its own large offset, the offsets orthogonal to each other.
    offset_a, offset_b = np.zeros(16), np.zeros(16)
    offset_a[0], offset_b[1] = 100.0, 100.0
    source, target = meaning + offset_a, meaning + 0.01 * rng.normal(size=meaning.shape) + offset_b
    raw = measures.retrieval_hits(source, target, targets)
    # Raw: every query's nearest neighbour is the candidate furthest along offset_a, the same one for all.
    assert raw.sum() <= 1
    labels = ["a"] * 30 + ["b"] * 30
    centred = measures.center(np.concatenate([source, target]), labels)
    assert measures.retrieval_hits(centred[:30], centred[30:], targets).all()
    # Hand-made: query 0 is nearest (cosine) to candidate 1, query 1 to candidate 1 as well.
    queries = np.array([[1.0, 0.1], [0.2, 1.0]])
    candidates = np.array([[0.0, 1.0], [1.0, 0.0]])
    np.testing.assert_array_equal(measures.retrieval_hits(queries, candidates, np.array([1, 0])), [True, True])
    np.testing.assert_array_equal(measures.retrieval_hits(queries, candidates, np.array([0, 1])), [False, False])
    with pytest.raises(DataError, match="a target outside 0..1"):
        measures.retrieval_hits(queries, candidates, np.array([0, 2]))


def test_projection_keeps_a_plane_and_explains_its_variance():
    rng = np.random.default_rng(1)
    plane = rng.normal(size=(50, 2)) * [3.0, 1.0]
    basis = np.linalg.qr(rng.normal(size=(6, 2)))[0].T  # two orthonormal directions in 6-D
    points = plane @ basis + 5.0
    projected, centre, explained = measures.project_2d(points, points[:2])
    assert explained.sum() == pytest.approx(1.0)
    assert explained[0] > explained[1]
    # Distances within the plane are kept exactly.
    original = np.linalg.norm(points[:, None] - points[None], axis=-1)
    np.testing.assert_allclose(np.linalg.norm(projected[:, None] - projected[None], axis=-1), original, atol=1e-9)
    np.testing.assert_allclose(centre, projected[:2], atol=1e-9)


def test_tokenizer_statistics_by_hand():
    from bertology.data import sentences_from_strings
    from bertology.languages.tokenization import tokenizer_row
    from bertology.models.tiny import tiny_tokenizer

    tokenizer = tiny_tokenizer("bert")
    sentences = sentences_from_strings(["the cat sat", "antidisestablishmentarianism ☃"])
    pieces = [tokenizer.tokenize(word) for s in sentences for word in s.words]
    row = tokenizer_row(tokenizer, sentences, 128, "xx")
    assert row["words"] == 5 and row["subwords"] == sum(map(len, pieces))
    assert row["fertility"] == pytest.approx(sum(map(len, pieces)) / 5)
    assert row["split_word_share"] == pytest.approx(sum(len(p) > 1 for p in pieces) / 5)
    unknown = [p == ["[UNK]"] for p in pieces]
    assert any(unknown), "the snowman is not in the tiny vocabulary"
    assert row["unk_word_share"] == pytest.approx(sum(unknown) / 5)
    assert row["unk_token_share"] == pytest.approx(sum(t == "[UNK]" for p in pieces for t in p) / row["subwords"])


# ------------------------------------------------------------------------------------------ treebanks


def _conllu(sentences: list[tuple[str, list[tuple[str, str, int, str]]]]) -> str:
    blocks = []
    for sent_id, words in sentences:
        lines = [f"# sent_id = {sent_id}", f"# text = {' '.join(w for w, *_ in words)}"]
        for i, (form, upos, head, rel) in enumerate(words, 1):
            lines.append(f"{i}\t{form}\t{form.lower()}\t{upos}\t_\t_\t{head}\t{rel}\t_\t_")
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks) + "\n"


def _sentences(prefix: str, n: int, upos: str = "NOUN"):
    return [(f"s{i}", [(f"{prefix}{i}", upos, 2, "nsubj"), ("x", "VERB", 0, "root")]) for i in range(n)]


def test_language_codes_folders_and_bad_treebanks(tmp_path):
    assert language_code("fr_pud-ud-test.conllu.gz") == "fr"
    assert language_code("en_ewt-ud-train.conllu") == "en"
    assert language_code("swahili.conllu") == "swahili"
    (tmp_path / "de").mkdir()
    (tmp_path / "de" / "de_x-ud-test.conllu").write_text(_conllu(_sentences("d", 12)))
    (tmp_path / "fr_x-ud-test.conllu").write_text(_conllu(_sentences("f", 12)))
    assert [p.name for p in treebank_files([tmp_path])] == ["fr_x-ud-test.conllu", "de_x-ud-test.conllu"]
    languages = read_treebanks([tmp_path])
    assert list(languages) == ["de", "fr"] and len(languages["de"].sentences) == 12
    assert check_alignment(languages) == [f"s{i}" for i in range(12)]

    lonely = tmp_path / "one"
    lonely.mkdir()
    (lonely / "es_x-ud-test.conllu").write_text(_conllu(_sentences("e", 1)))
    (lonely / "it_x-ud-test.conllu").write_text(_conllu(_sentences("i", 12)))
    with pytest.raises(DataError, match=r"es_x-ud-test.conllu: 1 sentence\(s\) of language 'es'; expected at least"):
        read_treebanks([lonely])
    with pytest.raises(DataError, match="one language only: fr"):
        read_treebanks([tmp_path / "fr_x-ud-test.conllu"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no .conllu or .conllu.gz files"):
        read_treebanks([tmp_path / "empty"])

    apart = tmp_path / "apart"
    apart.mkdir()
    (apart / "de_x-ud-test.conllu").write_text(_conllu(_sentences("d", 12)))
    (apart / "fr_x-ud-test.conllu").write_text(_conllu([(f"other{i}", w) for i, (_, w) in
                                                         enumerate(_sentences("f", 12))]))
    with pytest.raises(DataError, match=r"the treebanks share 0 sentence id\(s\) .*needs at least 2"):
        check_alignment(read_treebanks([apart]))


def test_tags_that_are_not_universal_are_named_with_file_and_line(tmp_path):
    path = tmp_path / "xx_bad-ud-test.conllu"
    sentences = _sentences("w", 11) + [("s11", [("dogs", "NNS", 2, "nsubj"), ("bark", "VERB", 0, "root")])]
    path.write_text(_conllu(sentences))
    other = tmp_path / "yy_ok-ud-test.conllu"
    other.write_text(_conllu(_sentences("v", 12)))
    languages = read_treebanks([path, other])
    problem = tag_problem(languages["xx"], "upos")
    assert problem.startswith(f"{path}: sentence 's11', line ")
    assert "word 1: UPOS 'NNS' is not a universal part-of-speech tag" in problem
    assert tag_problem(languages["yy"], "upos") is None
    assert tag_problem(languages["yy"], "deprel") is None


def test_split_ids_is_seeded_complete_and_shared_by_translations():
    ids = [f"n{i:03d}" for i in range(200)]
    split = split_ids(ids + ids[::-1], seed=0)
    assert set(split) == set(ids)
    counts = {part: sum(v == part for v in split.values()) for part in ("train", "dev", "test")}
    assert counts == {"train": 100, "dev": 20, "test": 80}
    assert split == split_ids(list(reversed(ids)), seed=0)  # the order given does not matter
    assert split != split_ids(ids, seed=1)
    assert set(split_ids(["a", "b", "c"]).values()) == {"train", "dev", "test"}


# ------------------------------------------------------------------------------------------ a tiny mBERT


def _first_blocks(source: Path, n: int) -> str:
    with gzip.open(source, "rt", encoding="utf-8") as handle:
        blocks = handle.read().strip("\n").split("\n\n")
    return "\n\n".join(blocks[:n]) + "\n\n"


@pytest.fixture(scope="module")
def pud(shared_data, tmp_path_factory):
    """The first 60 sentences of three PUD languages as files, and the first 300 of each (the tokenizer's)."""
    folder = tmp_path_factory.mktemp("pud")
    texts = []
    for code in ("de", "fr", "zh"):
        source = shared_data / "ud_pud" / code / f"{code}_pud-ud-test.conllu.gz"
        if not source.exists():
            pytest.skip(f"{source} not available")
        (folder / f"{code}_pud-ud-test.conllu").write_text(_first_blocks(source, 60), encoding="utf-8")
        from bertology.data import read_conllu

        texts += [" ".join(s.words) for s in read_conllu(source)[:300]]
    return folder, texts


@pytest.fixture(scope="module")
def tiny_mbert(pud):
    """A two-layer BERT with a WordPiece vocabulary trained on 900 sentences of German, French and Chinese."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    from bertology.models import Encoder

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(pud[1], trainers.WordPieceTrainer(vocab_size=1500, special_tokens=specials,
                                                              show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", tok.token_to_id("[CLS]")),
                                                 ("[SEP]", tok.token_to_id("[SEP]"))])
    tok.decoder = decoders.WordPiece()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                        model_max_length=512)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(3)
    return Encoder.from_model(BertModel(config).eval(), tokenizer, name="tiny-mbert")


@pytest.fixture(scope="module")
def languages_run(pud, tiny_mbert, tmp_path_factory):
    """One run on the three languages, with Chinese's UPOS column made non-universal in one word."""
    from bertology.languages import run_languages

    folder = tmp_path_factory.mktemp("bad-zh")
    for path in pud[0].iterdir():
        text = path.read_text(encoding="utf-8")
        if path.name.startswith("zh"):
            lines = text.split("\n")
            first = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
            columns = lines[first].split("\t")
            columns[3] = "NN"
            lines[first] = "\t".join(columns)
            text = "\n".join(lines)
        (folder / path.name).write_text(text, encoding="utf-8")
    cache = tmp_path_factory.mktemp("cache")
    result = run_languages(tiny_mbert, folder, seeds=(0, 1), tasks=("upos", "deprel"), max_train=400, max_dev=150,
                           cache_dir=cache, progress=False, n_boot=100, projection_sentences=20)
    return result, folder, cache


def _store_means(encoder, folder, code, cache):
    from bertology.languages.experiment import _extract
    from bertology.languages.treebanks import read_treebanks
    from bertology.probing.datasets import sentence_mean_vectors

    treebank = read_treebanks([folder])[code]
    store = _extract(encoder, treebank.sentences, cache, False, None)
    return treebank, [sentence_mean_vectors(store.layer(layer), store.offsets) for layer in store.layers]


def test_a_run_on_a_tiny_multilingual_bert_matches_hand_computations(languages_run, tiny_mbert):
    result, folder, cache = languages_run
    assert result.meta["languages"] == ["de", "fr", "zh"]
    # Centroid distances and retrieval recomputed from the stores with plain numpy.
    means = {code: _store_means(tiny_mbert, folder, code, cache) for code in ("de", "fr", "zh")}
    layer = 2
    de, fr = means["de"][1][layer], means["fr"][1][layer]
    row = result["centroids"].query("baseline == 'none' and layer == @layer and language_a == 'de' "
                                    "and language_b == 'fr'").iloc[0]
    assert row["euclidean"] == pytest.approx(np.linalg.norm(de.mean(0) - fr.mean(0)), rel=1e-5)
    split = split_ids([s.id for s in means["de"][0].sentences])
    test = np.array([split[s.id] == "test" for s in means["de"][0].sentences])
    for centred in (False, True):
        q, c = (de - de.mean(0), fr - fr.mean(0)) if centred else (de, fr)
        similarity = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (c / np.linalg.norm(c, axis=1, keepdims=True)).T
        expected = (similarity.argmax(1) == np.arange(len(q)))[test].mean()
        stored = result["retrieval"].query("baseline == 'none' and layer == @layer and query_language == 'de' and "
                                           f"target_language == 'fr' and centering == '{'centered' if centred else 'none'}'")
        assert stored["accuracy"].iloc[0] == pytest.approx(expected)
    # Exactly one best layer per baseline and centering, chosen on the non-test queries.
    best = result["retrieval_summary"].groupby(["baseline", "centering"])["best"].sum()
    assert (best == 1).all() and len(best) == 4


def test_identity_transfer_and_baselines_are_consistent(languages_run):
    result, _, _ = languages_run
    identity = result["identity_summary"]
    majority = identity.query("baseline == 'majority' and split == 'test'")["mean"]
    assert np.allclose(majority, 1 / 3, atol=0.05)  # three languages of the same size
    model_test = identity.query("baseline == 'none' and split == 'test'")
    assert (model_test["ci_low"] <= model_test["mean"] + 1e-9).all()
    assert (model_test["mean"] <= model_test["ci_high"] + 1e-9).all()
    assert set(identity["baseline"]) == {"none", "untrained", "majority"}
    # Chinese's UPOS column is not universal: its probes are absent with the reason; the others ran.
    absent = result["absent"]
    assert list(absent["measure"]) == ["upos"] and list(absent["language"]) == ["zh"]
    assert "UPOS 'NN' is not a universal part-of-speech tag" in absent["reason"].iloc[0]
    transfer = result["transfer_summary"]
    assert "zh" not in set(transfer.query("task == 'upos'")["language"])
    assert "zh" in set(transfer.query("task == 'deprel'")["language"]), "its relations are universal"
    ratio = result["transfer_ratio"].query("task == 'upos' and language == 'de' and baseline == 'none' and layer == 1"
                                           ).iloc[0]
    assert ratio["ratio"] == pytest.approx(ratio["zero_shot"] / ratio["in_language"])
    rows = result["transfer"].query("task == 'upos' and language == 'de' and baseline == 'none' and layer == 1 "
                                    "and split == 'test'")
    for setting, column in (("zero-shot", "zero_shot"), ("in-language", "in_language")):
        assert rows[rows["setting"] == setting]["accuracy"].mean() == pytest.approx(ratio[column])
    # Tokenizer table: fertility is subwords over words, by hand for German.
    tokenizer = result["tokenizer"].set_index("language")
    assert tokenizer.loc["de", "fertility"] == pytest.approx(tokenizer.loc["de", "subwords"] / tokenizer.loc["de", "words"])
    # SentEval tasks: every task is built or absent with a reason, never filled from elsewhere.
    tasks = result["tasks"]
    assert len(tasks) == 30
    assert (tasks.query("status == 'absent'")["reason"].str.len() > 0).all()
    assert (tasks.query("status == 'built'")["test"] > 0).all()


def test_treebanks_without_shared_ids_leave_retrieval_out_and_the_rest_runs(pud, tiny_mbert, tmp_path):
    from bertology.languages import run_languages

    for path in pud[0].iterdir():
        text = path.read_text(encoding="utf-8")
        if path.name.startswith("fr"):
            text = text.replace("# sent_id = ", "# sent_id = fr-")
        (tmp_path / path.name).write_text(text, encoding="utf-8")
    result = run_languages(tiny_mbert, tmp_path, seeds=(0,), tasks=(), untrained=False, senteval=False,
                           cache_dir=tmp_path / "cache", progress=False, n_boot=50, projection_sentences=10)
    assert "retrieval" not in result and "retrieval_summary" not in result
    (reason,) = result["absent"].query("measure == 'retrieval'")["reason"]
    assert reason.startswith("the treebanks share 0 sentence id(s)") and "\n" not in reason
    assert len(result["identity_summary"]) and len(result["centroids"])


def test_figures_and_display_tables(languages_run, tmp_path):
    from bertology.languages import display_tables, save_figures

    result, _, _ = languages_run
    made = save_figures(result, tmp_path, "tiny")
    assert {"identity", "projection", "tokenizer", "retrieval", "retrieval_matrix", "transfer_upos"} <= set(made)
    assert all(Path(p).stat().st_size > 1000 for p in made.values())
    tables = display_tables(result)
    assert list(tables["identity"].columns) == ["layer", "model", "untrained twin", "majority"]
    assert list(tables["transfer_upos"]["language"]) == ["de", "fr"]
    assert list(tables["transfer_deprel"]["language"]) == ["de", "fr", "zh"]


def test_the_report_section_runs_when_given_treebanks(pud, tiny_mbert, tmp_path, monkeypatch):
    from bertology.report import run_report

    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    outcome = run_report(encoder=tiny_mbert, out=tmp_path / "reports", seeds=(0,), max_sentences=30,
                         sections=["languages"], progress=False, languages=[pud[0]])
    assert outcome.ok, outcome.failed
    page = outcome.path.read_text(encoding="utf-8")
    assert 'id="languages"' in page or "id='languages'" in page
    assert "Language identity: test accuracy" in page and "Parallel sentence retrieval" in page
    assert "no treebanks of other languages" not in page


def test_the_command_line(pud, tiny_mbert, tmp_path, monkeypatch):
    import json
    import subprocess
    import sys

    from typer.testing import CliRunner

    from bertology.cli import app

    folder = tmp_path / "tiny-mbert"
    tiny_mbert.model.save_pretrained(folder)
    tiny_mbert.tokenizer.save_pretrained(folder)
    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    done = CliRunner().invoke(app, ["languages", "-m", str(folder), "--treebanks", str(pud[0]), "--seeds", "1",
                                    "--max-sentences", "30", "--tasks", "none", "--no-untrained", "--no-senteval",
                                    "-o", str(out), "--no-progress"], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert "language identity" in done.output and "parallel sentence retrieval" in done.output
    assert (out / "identity_summary.csv").is_file() and (out / "projection.png").is_file()
    assert json.loads((out / "meta.json").read_text())["meta"]["languages"] == ["de", "fr", "zh"]
    # Usage errors: one line, before anything heavy loads.
    code = ("import contextlib, io, sys\nfrom bertology.cli import main\n"
            f"sys.argv = ['bertology', 'languages', '--treebanks', {str(pud[0] / 'de_pud-ud-test.conllu')!r}]\n"
            "err = io.StringIO()\n"
            "with contextlib.redirect_stderr(err):\n"
            "    try:\n        main()\n    except SystemExit:\n        pass\n"
            "print(err.getvalue().strip())\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'sklearn', 'pandas'}))\n")
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    message, heavy = lines.strip().splitlines()[-2:]
    assert message.startswith("error: one language only: de") and heavy == "[]"
