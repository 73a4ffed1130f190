"""A seeded synthetic UD treebank for the probing-task tests (written as CoNLL-U train/dev/test files)."""

from __future__ import annotations

import random
from pathlib import Path

NOUNS = [(n, n + "s") for n in (
    "dog cat bird horse farmer teacher river house book apple car lamp boat tree road song door chair "
    "table window garden letter pencil bottle flower cup").split()] + [("child", "children"), ("mouse", "mice")]
VERBS = [("saw", "sees", "see"), ("found", "finds", "find")] + [
    (v + ("d" if v.endswith("e") else "ed"), v + ("es" if v.endswith(("sh", "ch")) else "s"), v) for v in (
        "chase like watch help paint push pull kick lift wash fix visit call follow greet clean open "
        "count paint park turn play ask thank").split()]
ADJS = ["old", "red", "small", "happy", "quiet", "green"]

DET = ("DET", "DT", "Definite=Def|PronType=Art")


def _noun(rng: random.Random):
    sing, plur = rng.choice(NOUNS)
    return (sing, "NOUN", "NN", "Number=Sing") if rng.random() < 0.5 else (plur, "NOUN", "NNS", "Number=Plur")


def _verb(rng: random.Random, subject_plural: bool):
    past, pres3, pres = rng.choice(VERBS)
    if rng.random() < 0.5:
        return past, "VERB", "VBD", "Mood=Ind|Tense=Past|VerbForm=Fin"
    if subject_plural:
        return pres, "VERB", "VBP", "Mood=Ind|Number=Plur|Person=3|Tense=Pres|VerbForm=Fin"
    return pres3, "VERB", "VBZ", "Mood=Ind|Number=Sing|Person=3|Tense=Pres|VerbForm=Fin"


def _clause(rng: random.Random, tag: str, first: bool, deep: bool) -> list[tuple]:
    """'The [very] adj N [near the N] V the [adj] N' as (key, form, upos, xpos, feats, head_key, deprel).

    'very' deepens the tree by one while the object's adjective (left out with 'very') keeps the length,
    so depth varies at a fixed length.
    """
    subj, verb_subj_plural = _noun(rng), None
    very = rng.random() < 0.3
    toks = [(tag + "det", "The" if first else "the", *DET, tag + "subj", "det")]
    if very:
        toks.append((tag + "very", "very", "ADV", "RB", "_", tag + "adj", "advmod"))
    toks.append((tag + "adj", rng.choice(ADJS), "ADJ", "JJ", "Degree=Pos", tag + "subj", "amod"))
    toks.append((tag + "subj", *subj, tag + "verb", "nsubj"))
    if deep:
        noun = _noun(rng)
        toks.append((tag + "near", "near", "ADP", "IN", "_", tag + "pp", "case"))
        toks.append((tag + "det2", "the", *DET, tag + "pp", "det"))
        toks.append((tag + "pp", *noun, tag + "subj", "nmod"))
    verb_subj_plural = subj[2] == "NNS"
    toks.append((tag + "verb", *_verb(rng, verb_subj_plural), None, None))
    toks.append((tag + "det3", "the", *DET, tag + "obj", "det"))
    if not very:
        toks.append((tag + "adj2", rng.choice(ADJS), "ADJ", "JJ", "Degree=Pos", tag + "obj", "amod"))
    toks.append((tag + "obj", *_noun(rng), tag + "verb", "obj"))
    return toks


def sentence(rng: random.Random) -> list[tuple]:
    """(form, upos, xpos, feats, head, deprel) rows; a third of the sentences coordinate two clauses."""
    kind = rng.random()
    toks = _clause(rng, "a", True, deep=kind < 0.35)
    toks = [t[:5] + ((0, "root") if t[0] == "averb" else t[5:]) for t in toks]
    if kind > 0.7:
        toks.append(("cc", "and", "CCONJ", "CC", "_", "bverb", "cc"))
        second = _clause(rng, "b", False, deep=False)
        toks += [t[:5] + (("averb", "conj") if t[0] == "bverb" else t[5:]) for t in second]
    toks.append(("punct", ".", "PUNCT", ".", "_", "averb", "punct"))
    index = {t[0]: i for i, t in enumerate(toks, start=1)}
    return [(t[1], t[2], t[3], t[4], t[5] if t[5] == 0 else index[t[5]], t[6]) for t in toks]


def write_treebank(directory: Path, sizes=(300, 80, 80), seed: int = 0, feats: bool = True) -> Path:
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in zip(("train", "dev", "test"), sizes):
        lines = []
        for k in range(n):
            toks = sentence(rng)
            lines.append(f"# sent_id = {split}-{k}")
            lines.append("# text = " + " ".join(t[0] for t in toks))
            for i, (form, upos, xpos, ft, head, rel) in enumerate(toks, start=1):
                lines.append("\t".join([str(i), form, form.lower(), upos, xpos, ft if feats else "_",
                                        str(head), rel, "_", "_"]))
            lines.append("")
        (directory / f"xx_tiny-ud-{split}.conllu").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory
