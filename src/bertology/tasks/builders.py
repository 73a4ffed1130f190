"""The ten task builders. Each turns split sentences into labelled instances, following Conneau et al.
(2018) as closely as dependency trees allow; every departure is returned as a ``deviation`` string and
ends up in the manifest and docs/tasks.md.

A builder gets a :class:`BuildContext` (sentences per split, already length-filtered and de-duplicated
across splits, plus corpus statistics) and returns a :class:`TaskOutput`. It never raises for data
reasons: when nothing can be built it returns an empty output whose ``rejected`` counter says why.

Length: a catalogue, the ten builders and the tree helpers several of them share (target-word claiming, depth,
constituents); each builder reads beside its row of docs/tasks.md.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from bertology.data import Sentence
from bertology.data.treebank import tree_or_none

SPLITS = ("train", "dev", "test")
#: Order in which splits claim target word forms: the test split keeps all of its forms.
CLAIM_ORDER = ("test", "dev", "train")

SENTLEN_BINS = ((5, 8), (9, 12), (13, 16), (17, 20), (21, 25), (26, 28))


@dataclass
class Instance:
    label: str
    words: tuple[str, ...]
    source_id: str
    form: str | None = None  # the target word form that must not cross splits (lexical tasks)
    stratum: object = None  # extra balancing key (CoordInv clause-length relation)


@dataclass
class TaskOutput:
    instances: dict[str, list[Instance]] = field(default_factory=lambda: {s: [] for s in SPLITS})
    deviations: list[str] = field(default_factory=list)
    rejected: Counter = field(default_factory=Counter)  # reason -> number of sentences
    params: dict = field(default_factory=dict)
    label_order: list[str] | None = None

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.instances.values())


@dataclass
class BuildContext:
    splits: dict[str, list[Sentence]]
    seed: int
    frequency: Counter  # lower-cased word form -> count over the whole treebank
    train_frequency: Counter  # the same over train only (used where a choice must not look at test)
    casing: dict[str, str]  # lower-cased form -> its most frequent spelling
    #: train/dev/test shares when the splits are a random re-split of pooled sentences: lexical tasks then give
    #: each target form to one split by these shares (:func:`assign_forms`) instead of test claiming first.
    form_shares: tuple[float, float, float] | None = None

    def rng(self, task: str) -> np.random.Generator:
        # One stream per task, so building a subset of tasks gives the same files as building all.
        return np.random.default_rng([self.seed, sum(ord(c) * 31**i for i, c in enumerate(task)) % 2**32])


# --------------------------------------------------------------------------------------- helpers


def _shuffled(items: list, rng: np.random.Generator) -> list:
    order = rng.permutation(len(items))
    return [items[i] for i in order]


def balance(instances: list[Instance], rng: np.random.Generator, labels: list[str] | None = None) -> list[Instance]:
    """Down-sample every label to the rarest label's count (all of ``labels`` must be present)."""
    by_label: dict[str, list[Instance]] = defaultdict(list)
    for inst in instances:
        by_label[inst.label].append(inst)
    wanted = labels if labels is not None else sorted(by_label)
    if not wanted or any(not by_label[label] for label in wanted):
        return []
    n = min(len(by_label[label]) for label in wanted)
    out = []
    for label in wanted:
        out.extend(_shuffled(by_label[label], rng)[:n])
    return _shuffled(out, rng)


def assign_forms(per_split: dict[str, list[Instance]], shares: tuple[float, float, float]
                 ) -> dict[str, list[Instance]]:
    """Every instance moved to the split its target form is given, so each form lives in one split and the
    splits hold about ``shares`` of the instances: forms in order of frequency (ties by spelling) go one by
    one to the split furthest below its share. For randomly re-split sentences only: an instance's own
    split carries no meaning there, and claiming test-first would hand test every frequent form."""
    pooled = [inst for split in SPLITS for inst in per_split[split]]
    counts = Counter(inst.form for inst in pooled)
    target = dict(zip(SPLITS, (share * len(pooled) for share in shares)))
    filled = dict.fromkeys(SPLITS, 0)
    home: dict = {}
    for form, n in sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0]))):
        split = max(SPLITS, key=lambda s: ((target[s] - filled[s]) / target[s] if target[s] else -math.inf))
        home[form] = split
        filled[split] += n
    return {split: [inst for inst in pooled if home[inst.form] == split] for split in SPLITS}


def _form_rule(ctx: BuildContext) -> str:
    """How the lexical tasks kept target forms split-disjoint, for the manifest's deviations."""
    if ctx.form_shares is not None:
        return "each form given to one split by the split shares, most frequent first"
    return "test keeps all; dev drops test's forms; train drops dev's and test's"


def balance_form_disjoint(
    per_split: dict[str, list[Instance]], rng: np.random.Generator, labels: list[str],
    shares: tuple[float, float, float] | None = None,
) -> dict[str, list[Instance]]:
    """Balance labels per split and keep every target form in one split only.

    Splits claim forms in the order test, dev, train: test keeps all its instances, dev drops those whose form
    is in test, train drops those whose form is in dev or test. SentEval instead assigned forms to partitions
    when sampling from a corpus 1000x larger; with a small treebank this keeps the test split intact.
    With ``shares`` (randomly re-split sentences, ``split="pooled"``) forms are given to splits by
    :func:`assign_forms` instead.
    """
    if shares is not None:
        moved = assign_forms(per_split, shares)
        return {split: balance(moved[split], rng, labels) for split in SPLITS}
    claimed: set[str] = set()
    out = {}
    for split in CLAIM_ORDER:
        free = [inst for inst in per_split[split] if inst.form not in claimed]
        kept = balance(free, rng, labels)
        out[split] = kept
        claimed |= {inst.form for inst in kept}
    return out


def _is_punct(sentence: Sentence, i: int) -> bool:
    if sentence.upos is not None and sentence.upos[i] not in ("_", ""):
        return sentence.upos[i] == "PUNCT"
    return all(not ch.isalnum() for ch in sentence.words[i])


def _has_tree(sentence: Sentence) -> bool:
    return tree_or_none(sentence) is not None


def _is_contiguous(indices: list[int]) -> bool:
    return bool(indices) and indices[-1] - indices[0] + 1 == len(indices)


def _restore_case(ctx: BuildContext, word: str) -> str:
    """A sentence-initial word in its usual spelling (``The`` -> ``the``, ``I`` stays ``I``)."""
    usual = ctx.casing.get(word.lower())
    return usual if usual is not None and usual.lower() == word.lower() else word


def _capitalize_first(word: str) -> str:
    return word[:1].upper() + word[1:]


def _for_each_split(ctx: BuildContext, fn: Callable[[Sentence, Counter], Instance | None]) -> tuple[dict, Counter]:
    per_split: dict[str, list[Instance]] = {}
    rejected: Counter = Counter()
    for split in SPLITS:
        found = []
        for sentence in ctx.splits[split]:
            inst = fn(sentence, rejected)
            if inst is not None:
                found.append(inst)
        per_split[split] = found
    return per_split, rejected


# ------------------------------------------------------------------------------------ the tasks


def build_sentence_length(ctx: BuildContext) -> TaskOutput:
    rng = ctx.rng("sentence_length")
    labels = [str(i) for i in range(len(SENTLEN_BINS))]

    def one(sentence: Sentence, rejected: Counter) -> Instance | None:
        for label, (lo, hi) in enumerate(SENTLEN_BINS):
            if lo <= len(sentence) <= hi:
                return Instance(str(label), sentence.words, sentence.id)
        rejected["length outside the 6 bins (5-28 words)"] += 1
        return None

    per_split, rejected = _for_each_split(ctx, one)
    # Bins missing from train (a treebank without long sentences) are left out rather than emptying the task.
    present = {inst.label for inst in per_split["train"]}
    labels = [label for label in labels if label in present]
    out = TaskOutput(rejected=rejected, label_order=labels, params={"bins": [list(b) for b in SENTLEN_BINS]})
    for split in SPLITS:
        in_split = {inst.label for inst in per_split[split]}
        out.instances[split] = balance(per_split[split], rng, [label for label in labels if label in in_split])
    out.deviations.append(
        "length counts UD syntactic words (punctuation included; contractions split as the treebank splits "
        "them), where SentEval counted Moses tokens"
    )
    return out


#: WC: how many target words, and how many of the most frequent train words to skip first. SentEval took
#: 1000 words from rank 2001 of a ~1000x larger corpus; these keep >= ~20 train sentences per word on EWT.
WC_NUM_WORDS = 50
WC_SKIP_TOP = 50
WC_MIN_CHARS = 4


def build_word_content(ctx: BuildContext) -> TaskOutput:
    rng = ctx.rng("word_content")
    ranked = [w for w, _ in sorted(ctx.train_frequency.items(), key=lambda kv: (-kv[1], kv[0]))]
    targets = [w for w in ranked[WC_SKIP_TOP:] if w.isalpha() and len(w) >= WC_MIN_CHARS][:WC_NUM_WORDS]
    target_set = set(targets)

    def one(sentence: Sentence, rejected: Counter) -> Instance | None:
        hits = [w.lower() for w in sentence.words if w.lower() in target_set]
        if len(hits) != 1:
            rejected["no target word" if not hits else "more than one target word (or one twice)"] += 1
            return None
        return Instance(hits[0], sentence.words, sentence.id)

    per_split, rejected = _for_each_split(ctx, one)
    out = TaskOutput(rejected=rejected, label_order=sorted(targets),
                     params={"num_words": len(targets), "skip_top": WC_SKIP_TOP, "min_chars": WC_MIN_CHARS})
    if len(targets) < 2:
        rejected["fewer than 2 candidate target words in train"] += 1
        return out
    tr_counts = Counter(inst.label for inst in per_split["train"])
    # Drop target words absent from train rather than the whole task.
    targets = [w for w in targets if tr_counts.get(w, 0) > 0]
    out.label_order = sorted(targets)
    out.instances, quotas = balance_capped(per_split, rng, out.label_order, {s: len(ctx.splits[s]) for s in SPLITS})
    out.params["per_word_quota"] = quotas
    out.deviations += [
        f"{len(targets)} target words (not 1000): lower-cased alphabetic words of >= {WC_MIN_CHARS} characters "
        f"taken by train frequency after the {WC_SKIP_TOP} most frequent, where SentEval took 1000 words from rank 2001",
        "train is exactly balanced (each word as often as the rarest); dev/test are capped per word at the train quota "
        "scaled by split size and may miss rare words, so they are only roughly balanced",
    ]
    return out


def build_tree_depth(ctx: BuildContext) -> TaskOutput:
    """Depth classes balanced and made independent of length: in every (split, length) cell each depth
    class gets the same number of sentences (a stratified version of SentEval's decorrelated sample)."""
    rng = ctx.rng("tree_depth")

    def one(sentence: Sentence, rejected: Counter) -> Instance | None:
        tree = tree_or_none(sentence)
        if tree is None:
            rejected["no dependency tree (HEAD missing, or not one root without cycles)"] += 1
            return None
        return Instance(str(tree.depth), sentence.words, sentence.id, stratum=len(sentence))

    per_split, rejected = _for_each_split(ctx, one)
    out = TaskOutput(rejected=rejected)
    if not any(per_split.values()):
        return out

    def kept_per_split(depths: list[int], split: str) -> dict[int, list[list[Instance]]]:
        cells: dict[int, dict[int, list[Instance]]] = defaultdict(lambda: defaultdict(list))
        for inst in per_split[split]:
            cells[inst.stratum][int(inst.label)].append(inst)
        return {length: [cells[length][d] for d in depths] for length in cells}

    # Choose the contiguous range of depth classes (>= 3 classes) that keeps the most sentences in train;
    # chosen on train only, so the test split does not shape the label set.
    tr_depths = sorted({int(i.label) for i in per_split["train"]})
    best: tuple[int, list[int]] = (0, [])
    for lo_i in range(len(tr_depths)):
        for hi_i in range(lo_i + 2, len(tr_depths)):
            depths = list(range(tr_depths[lo_i], tr_depths[hi_i] + 1))
            n_tr = sum(len(depths) * min(len(c) for c in cell) for cell in kept_per_split(depths, "train").values())
            if n_tr > best[0]:
                best = (n_tr, depths)
    depths = best[1]
    if not depths:
        rejected["fewer than 3 depth classes co-occur at any length in train"] += 1
        return out
    for split in SPLITS:
        kept = []
        for cell in kept_per_split(depths, split).values():
            n = min(len(c) for c in cell)
            for c in cell:
                kept.extend(_shuffled(c, rng)[:n])
        out.instances[split] = _shuffled(kept, rng)
    out.label_order = [str(d) for d in depths]
    out.params = {"depth_classes": depths, "depth": "arcs on the longest root-to-leaf path (a one-word tree has "
                  "depth 0; bertology.data.treebank)"}
    out.deviations += [
        f"depth of the dependency tree (classes {depths[0]}-{depths[-1]}), where SentEval used constituency "
        "trees (classes 5-12); dependency trees are flatter",
        "decorrelated from length by exact stratification (same count of every depth class at every sentence "
        "length, per split) instead of sampling from a bivariate Gaussian; the classes are the contiguous depth "
        "range (>= 3 classes) that keeps the most train sentences",
    ]
    return out


TOPCONST_CLASSES = 19  # + OTHER, as SentEval


#: Relations that sit inside the root's own phrase (a nominal predicate's determiner, adjective, ...).
_PHRASE_INTERNAL = frozenset({"det", "amod", "nummod", "compound", "case", "nmod", "flat", "fixed", "clf", "goeswith"})


def top_sequence(sentence: Sentence) -> str | None:
    """The sentence's top-level shape, e.g. ``advmod_nsubj_VP_.`` (SentEval: ``ADVP_NP_VP_.``).

    Mirrors a constituency parse's children of S: the root's dependents *before* the root, by UD
    relation, then the root itself (``VP`` for verbal and copular roots, else its UPOS), then ``cc_conj``
    when the root's only conjunct is a clause, then ``.``. Auxiliaries and copulas after the subject
    and everything after them belong to the VP, as do relations inside the root's own phrase (det, amod,
    ...) and the root's later dependents. None when
    the sentence does not end in punctuation under the root or has other punctuation under the root
    (SentEval dropped sequences with sentence-internal punctuation).
    """
    tree = tree_or_none(sentence)
    if tree is None or sentence.deprels is None:
        return None
    root = tree.root
    last = len(sentence) - 1
    if not (_is_punct(sentence, last) and tree.parent(last) == root):
        return None
    kids = tree.children
    rels = {i: tree.base_relation(i) for i in kids[root]}
    if any(_is_punct(sentence, i) for i in kids[root] if i != last):
        return None
    parts = []
    seen_subject = False
    for i in kids[root]:
        if i > root:
            break
        if rels[i] in ("aux", "cop") and seen_subject:
            break  # from here on the words before the root are inside the VP
        if rels[i] in _PHRASE_INTERNAL:
            continue
        seen_subject = seen_subject or rels[i] in ("nsubj", "csubj", "expl")
        parts.append(rels[i])
    upos = sentence.upos[root] if sentence.upos else "_"
    verbal = upos in ("VERB", "AUX") or any(r == "cop" for r in rels.values())
    parts.append("VP" if verbal else upos)
    conjuncts = [i for i in kids[root] if i > root and rels[i] == "conj"]
    if len(conjuncts) == 1 and any(
        tree.base_relation(j) in ("nsubj", "csubj", "expl") for j in kids[conjuncts[0]]
    ):
        parts += ["cc_conj"]
    parts.append(".")
    return "_".join(parts)


def balance_capped(per_split: dict[str, list[Instance]], rng: np.random.Generator, labels: list[str],
                   split_sizes: dict[str, int]) -> tuple[dict[str, list[Instance]], dict[str, int]]:
    """For many-class tasks on a small treebank: train exactly balanced (every label as often as the rarest
    in train); dev/test take at most that quota scaled by split size per label, so they are roughly balanced
    but may lack rare labels (demanding every label in every small split would empty them)."""
    tr_counts = Counter(inst.label for inst in per_split["train"])
    quota_tr = min(tr_counts.get(label, 0) for label in labels)
    out, quotas = {}, {}
    for split in SPLITS:
        quota = quota_tr if split == "train" else max(
            1, math.ceil(quota_tr * split_sizes[split] / max(split_sizes["train"], 1)))
        taken: Counter = Counter()
        kept = []
        for inst in _shuffled(per_split[split], rng):
            if inst.label in labels and taken[inst.label] < quota:
                taken[inst.label] += 1
                kept.append(inst)
        out[split], quotas[split] = (kept if quota_tr > 0 else []), quota
    return out, quotas


def build_top_constituents(ctx: BuildContext) -> TaskOutput:
    rng = ctx.rng("top_constituents")

    def one(sentence: Sentence, rejected: Counter) -> Instance | None:
        if not _has_tree(sentence):
            rejected["no dependency tree (HEAD missing, or not one root without cycles)"] += 1
            return None
        seq = top_sequence(sentence)
        if seq is None:
            rejected["no final punctuation under the root, or other punctuation under the root"] += 1
            return None
        return Instance(seq, sentence.words, sentence.id)

    per_split, rejected = _for_each_split(ctx, one)
    counts = Counter(inst.label for inst in per_split["train"])
    classes = [seq for seq, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOPCONST_CLASSES]]
    out = TaskOutput(rejected=rejected, label_order=sorted(classes) + ["OTHER"],
                     params={"classes": sorted(classes) + ["OTHER"]})
    if len(classes) < 2:
        rejected["fewer than 2 top-level sequences in train"] += 1
        return out
    keep = set(classes)
    if all(inst.label in keep for inst in per_split["train"]):
        out.label_order.remove("OTHER")  # fewer than 20 sequences in train: no OTHER class
        out.params["classes"] = out.label_order
    relabelled = {
        split: [Instance(i.label if i.label in keep else "OTHER", i.words, i.source_id) for i in per_split[split]]
        for split in SPLITS
    }
    out.instances, quotas = balance_capped(relabelled, rng, out.label_order,
                                           {s: len(ctx.splits[s]) for s in SPLITS})
    out.params["per_label_quota"] = quotas
    out.deviations += [
        "labels come from the dependency tree: the root's dependents before it (UD relations), VP for a verbal "
        "or copular root (else its UPOS), cc_conj for a coordinated clause, '.' (e.g. advmod_nsubj_VP_. for "
        "SentEval's ADVP_NP_VP_.); SentEval used the constituents under S",
        f"the {TOPCONST_CLASSES} most frequent sequences are counted on train only",
        "train is exactly balanced; dev/test are capped per label at the train quota scaled by split size (roughly balanced)",
    ]
    return out


def build_bigram_shift(ctx: BuildContext) -> TaskOutput:
    rng = ctx.rng("bigram_shift")
    out = TaskOutput(label_order=["I", "O"])
    for split in SPLITS:
        candidates = []
        for sentence in ctx.splits[split]:
            if any('"' in w or w in ("``", "''") for w in sentence.words):
                out.rejected["contains a double quote"] += 1
                continue
            # Pairs (i, i+1) not involving the first word or punctuation, whose swap changes the sentence.
            pairs = [
                i for i in range(1, len(sentence) - 1)
                if not _is_punct(sentence, i) and not _is_punct(sentence, i + 1)
                and sentence.words[i] != sentence.words[i + 1]
            ]
            if not pairs:
                out.rejected["no swappable adjacent word pair"] += 1
                continue
            candidates.append((sentence, pairs))
        candidates = _shuffled(candidates, rng)
        half = len(candidates) // 2
        instances = []
        for k, (sentence, pairs) in enumerate(candidates[: 2 * half]):
            if k < half:
                i = pairs[int(rng.integers(len(pairs)))]
                words = list(sentence.words)
                words[i], words[i + 1] = words[i + 1], words[i]
                instances.append(Instance("I", tuple(words), sentence.id))
            else:
                instances.append(Instance("O", sentence.words, sentence.id))
        out.instances[split] = _shuffled(instances, rng)
    out.deviations.append("punctuation is recognised by UPOS PUNCT instead of PTB tags")
    return out


def main_finite_verb(sentence: Sentence) -> int | None:
    """The word carrying the main clause's tense: the root if finite, else its leftmost finite aux/cop."""
    tree = tree_or_none(sentence)
    if tree is None or sentence.feats is None:
        return None
    root = tree.root
    if sentence.feats[root].get("VerbForm") == "Fin" or (
        "Tense" in sentence.feats[root] and sentence.upos[root] in ("VERB", "AUX") and "VerbForm" not in sentence.feats[root]
    ):
        return root
    for i in tree.children[root]:
        if tree.base_relation(i) in ("aux", "cop") and sentence.feats[i].get("VerbForm") == "Fin":
            return i
    return None


_TENSE_LABELS = {"Past": "PAST", "Pres": "PRES"}


def tense_instance(sentence: Sentence, rejected: Counter) -> Instance | None:
    """Tense instance (label PAST/PRES, form = the tense-bearing verb), or None with the reason counted."""
    if not _has_tree(sentence):
        rejected["no dependency tree (HEAD missing, or not one root without cycles)"] += 1
        return None
    verb = main_finite_verb(sentence)
    if verb is None:
        rejected["no finite verb in the main clause (VerbForm=Fin)"] += 1
        return None
    tense = sentence.feats[verb].get("Tense")
    if tense is None:
        rejected["main finite verb has no Tense feature (modals, imperatives, or a treebank without Tense)"] += 1
        return None
    if tense not in _TENSE_LABELS:
        rejected[f"main verb Tense={tense} (neither Past nor Pres)"] += 1
        return None
    return Instance(_TENSE_LABELS[tense], sentence.words, sentence.id, form=sentence.words[verb].lower())


def build_past_present(ctx: BuildContext) -> TaskOutput:
    rng = ctx.rng("past_present")
    one = tense_instance
    per_split, rejected = _for_each_split(ctx, one)
    out = TaskOutput(rejected=rejected, label_order=["PAST", "PRES"])
    out.instances = balance_form_disjoint(per_split, rng, out.label_order, ctx.form_shares)
    out.deviations += [
        "the main verb is the root when finite, else the root's leftmost finite aux/cop (so 'has eaten' is PRES), "
        "labelled by the UD Tense feature instead of the PTB tags VBD vs VBP/VBZ",
        "no 100-5000 corpus-frequency band for the verb (the treebank is too small); verb forms are still "
        f"disjoint across splits ({_form_rule(ctx)})",
    ]
    return out


SUBJECT_RELATIONS = ("nsubj", "nsubj:pass")
OBJECT_RELATIONS = ("obj",)


def number_instance(relations: tuple[str, ...], name: str) -> Callable[[Sentence, Counter], Instance | None]:
    """Per-sentence SubjNum/ObjNum extractor: NN/NNS for the root's first ``relations`` dependent."""
    def one(sentence: Sentence, rejected: Counter) -> Instance | None:
        tree = tree_or_none(sentence)
        if tree is None:
            rejected["no dependency tree (HEAD missing, or not one root without cycles)"] += 1
            return None
        args = [i for i in tree.children[tree.root] if sentence.deprels[i] in relations]
        if not args:
            rejected[f"no {name} ({'/'.join(relations)}) under the root"] += 1
            return None
        arg = args[0]
        if sentence.upos[arg] != "NOUN":
            rejected[f"{name} is not a common noun (UPOS {sentence.upos[arg]})"] += 1
            return None
        number = sentence.feats[arg].get("Number") if sentence.feats else None
        if number is None:
            rejected[f"{name} noun has no Number feature"] += 1
            return None
        if number not in ("Sing", "Plur"):
            rejected[f"{name} noun has Number={number} (neither Sing nor Plur)"] += 1
            return None
        return Instance("NN" if number == "Sing" else "NNS", sentence.words, sentence.id,
                        form=sentence.words[arg].lower())

    return one


def _build_number(ctx: BuildContext, task: str, relations: tuple[str, ...], name: str) -> TaskOutput:
    rng = ctx.rng(task)
    per_split, rejected = _for_each_split(ctx, number_instance(relations, name))
    out = TaskOutput(rejected=rejected, label_order=["NN", "NNS"], params={"relations": list(relations)})
    out.instances = balance_form_disjoint(per_split, rng, out.label_order, ctx.form_shares)
    out.deviations += [
        f"the {name} is the root's first {'/'.join(relations)} dependent, kept only when it is a common noun "
        "(UPOS NOUN); NN/NNS come from the UD Number feature (Sing/Plur) instead of PTB tags",
        "no 100-5000 corpus-frequency band for the noun (the treebank is too small); noun forms are still "
        f"disjoint across splits ({_form_rule(ctx)})",
    ]
    return out


def build_subj_number(ctx: BuildContext) -> TaskOutput:
    return _build_number(ctx, "subj_number", SUBJECT_RELATIONS, "subject")


def build_obj_number(ctx: BuildContext) -> TaskOutput:
    return _build_number(ctx, "obj_number", OBJECT_RELATIONS, "direct object")


#: SOMO frequency band for target and replacement (SentEval: 40-400 in a ~1000x larger corpus) and the
#: largest log2 frequency ratio between them (SentEval matched bigram frequencies "in log-scale").
SOMO_MIN_FREQ = 5
SOMO_MAX_FREQ = 200
SOMO_MAX_LOG2_RATIO = 1.0


def build_odd_man_out(ctx: BuildContext) -> TaskOutput:
    rng = ctx.rng("odd_man_out")
    out = TaskOutput(label_order=["C", "O"], params={
        "frequency_band": [SOMO_MIN_FREQ, SOMO_MAX_FREQ], "max_log2_frequency_ratio": SOMO_MAX_LOG2_RATIO,
    })

    def in_band(form: str) -> bool:
        return SOMO_MIN_FREQ <= ctx.frequency[form] <= SOMO_MAX_FREQ

    # Lexicon: every in-band alphabetic NOUN/VERB form with its most frequent (UPOS, FEATS) analysis.
    analyses: dict[str, Counter] = defaultdict(Counter)
    for split in SPLITS:
        for s in ctx.splits[split]:
            if s.upos is None:
                continue
            for w, u, f in zip(s.words, s.upos, s.feats or [{}] * len(s)):
                if u in ("NOUN", "VERB") and w.isalpha() and in_band(w.lower()):
                    analyses[w.lower()][(u, tuple(sorted(f.items())))] += 1
    by_class: dict[tuple, list[str]] = defaultdict(list)
    for form, counter in analyses.items():
        by_class[counter.most_common(1)[0][0]].append(form)
    for forms in by_class.values():
        forms.sort()

    def slots(sentence: Sentence) -> list[int]:
        if sentence.upos is None:
            return []
        return [
            i for i, (w, u) in enumerate(zip(sentence.words, sentence.upos))
            if u in ("NOUN", "VERB") and w.isalpha() and w.lower() in analyses
        ]

    used_elsewhere: set[str] = set()
    for split in CLAIM_ORDER:
        candidates = []
        for sentence in ctx.splits[split]:
            positions = slots(sentence)
            if positions:
                candidates.append((sentence, positions))
            else:
                out.rejected["no NOUN/VERB in the frequency band"] += 1
        changed, original = [], []
        used_here: set[str] = set()
        for sentence, positions in _shuffled(candidates, rng):
            if len(changed) > len(original):
                original.append(Instance("O", sentence.words, sentence.id))
                continue
            i = positions[int(rng.integers(len(positions)))]
            word = sentence.words[i].lower()
            key = (sentence.upos[i], tuple(sorted((sentence.feats[i] if sentence.feats else {}).items())))
            log_f = math.log2(ctx.frequency[word])
            options = [
                form for form in by_class.get(key, ())
                if form != word and form not in used_elsewhere
                and abs(math.log2(ctx.frequency[form]) - log_f) <= SOMO_MAX_LOG2_RATIO
            ]
            if not options:
                out.rejected["no replacement of the same UPOS+FEATS and similar frequency"] += 1
                original.append(Instance("O", sentence.words, sentence.id))
                continue
            replacement = options[int(rng.integers(len(options)))]
            surface = ctx.casing.get(replacement, replacement)
            if sentence.words[i][:1].isupper():
                surface = _capitalize_first(surface)
            words = list(sentence.words)
            words[i] = surface
            used_here.add(replacement)
            changed.append(Instance("C", tuple(words), sentence.id, form=replacement))
        n = min(len(changed), len(original))
        kept_changed = changed[:n]
        out.instances[split] = _shuffled(kept_changed + original[:n], rng)
        used_elsewhere |= {inst.form for inst in kept_changed}
    out.deviations += [
        f"target and replacement have treebank frequency {SOMO_MIN_FREQ}-{SOMO_MAX_FREQ} (SentEval: 40-400 in "
        "a ~1000x larger corpus) and the same UPOS and FEATS (SentEval: same PTB tag)",
        f"frequencies are matched on the word itself (log2 ratio <= {SOMO_MAX_LOG2_RATIO}), not on the bigrams "
        "it forms with its neighbours: bigram counts in a treebank are mostly 0 or 1",
        "replacement words are disjoint across splits (test first, then dev, then train); every sentence appears once",
    ]
    return out


def coordination(sentence: Sentence) -> tuple[list[int], list[int], list[int], list[int]] | None:
    """Split ``clause1 [,] CC clause2 [punct]`` where the single CCONJ joins two clauses with subjects.

    Returns (clause1, connector, clause2, tail) as word-index lists, or None when the sentence is not
    two top-level clauses joined by its only coordinating conjunction.
    """
    if sentence.upos is None or sum(u == "CCONJ" for u in sentence.upos) != 1:
        return None
    tree = tree_or_none(sentence)
    if tree is None:
        return None
    root, kids = tree.root, tree.children
    subjects = ("nsubj", "csubj", "expl")
    conjuncts = [i for i in kids[root] if tree.base_relation(i) == "conj"]
    if len(conjuncts) != 1:
        return None
    second = conjuncts[0]
    cc = [i for i in kids[second] if tree.base_relation(i) == "cc" and sentence.upos[i] == "CCONJ"]
    if len(cc) != 1:
        return None
    if not any(tree.base_relation(i) in subjects for i in kids[root]):
        return None
    if not any(tree.base_relation(i) in subjects for i in kids[second]):
        return None
    span2 = tree.subtree(second)
    if not _is_contiguous(span2):
        return None
    n = len(sentence)
    tail = list(range(span2[-1] + 1, n))
    if any(not _is_punct(sentence, i) for i in tail):
        return None
    lead = [i for i in span2 if i <= cc[0]]
    if any(not _is_punct(sentence, i) for i in lead[:-1]):
        return None  # something other than punctuation between the conjunct's start and the CC
    clause2 = [i for i in span2 if i > cc[0]]
    clause1 = list(range(0, span2[0]))
    while clause1 and _is_punct(sentence, clause1[-1]):
        lead.insert(0, clause1.pop())  # a comma before the CC attached to the first clause travels with the CC
    if not clause1 or not clause2:
        return None
    if _is_punct(sentence, clause2[-1]):
        return None  # e.g. a closing bracket of the second clause would end up mid-sentence
    if not (root in clause1 and second in clause2):
        return None
    return clause1, lead, clause2, tail


def build_coordination_inversion(ctx: BuildContext) -> TaskOutput:
    rng = ctx.rng("coordination_inversion")
    out = TaskOutput(label_order=["I", "O"])

    def content_length(sentence: Sentence, idx: list[int]) -> int:
        return sum(not _is_punct(sentence, i) for i in idx)

    for split in SPLITS:
        groups: dict[str, list[tuple[Sentence, tuple]]] = defaultdict(list)
        for sentence in ctx.splits[split]:
            if not _has_tree(sentence):
                out.rejected["no dependency tree (HEAD missing, or not one root without cycles)"] += 1
                continue
            parts = coordination(sentence)
            if parts is None:
                out.rejected["not two subject-bearing main clauses joined by the only CCONJ"] += 1
                continue
            a, b = content_length(sentence, parts[0]), content_length(sentence, parts[2])
            groups["first" if a > b else "second" if b > a else "equal"].append((sentence, parts))
        # Equal numbers of first-longer and second-longer cases, each cut in half between O and I, so the
        # presented O and I sets have the same length relations (inversion flips first/second).
        k = min(len(groups["first"]), len(groups["second"]))
        instances = []
        for relation in ("first", "second", "equal"):
            items = _shuffled(groups[relation], rng)
            if relation != "equal":
                items = items[:k]
            half = len(items) // 2
            for j, (sentence, (c1, lead, c2, tail)) in enumerate(items[: 2 * half]):
                if j < half:
                    instances.append(Instance("O", sentence.words, sentence.id))
                    continue
                w = sentence.words
                first = [w[i] for i in c2]
                rest = [_restore_case(ctx, w[c1[0]])] + [w[i] for i in c1[1:]]
                words = [_capitalize_first(first[0])] + first[1:] + [w[i] for i in lead] + rest + [w[i] for i in tail]
                instances.append(Instance("I", tuple(words), sentence.id))
        out.instances[split] = _shuffled(instances, rng)
    out.deviations += [
        "clauses are found in the dependency tree: the root and its only conj dependent, both with a subject, "
        "joined by the sentence's only CCONJ (attached to the second conjunct as cc)",
        "the inverted sentence re-capitalises its new first word and writes the old first word in its usual "
        "treebank spelling",
    ]
    return out


BUILDERS: dict[str, Callable[[BuildContext], TaskOutput]] = {
    "sentence_length": build_sentence_length,
    "word_content": build_word_content,
    "tree_depth": build_tree_depth,
    "top_constituents": build_top_constituents,
    "bigram_shift": build_bigram_shift,
    "past_present": build_past_present,
    "subj_number": build_subj_number,
    "obj_number": build_obj_number,
    "odd_man_out": build_odd_man_out,
    "coordination_inversion": build_coordination_inversion,
}
