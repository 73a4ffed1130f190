"""The claims: one entry each, with its statement, the seed document and paper it comes from, the table it
reads, the statistic, the direction the claim predicts, the pre-stated verdict rule and the paper's own number
where the seed gives one. The rules themselves are the functions of :mod:`bertology.claims.checks`.

Seeds (the five source documents of the project, ``/work/shared/seeds``):

* ``Primer``: "A Primer in BERTology: What we know about how BERT works" (Rogers, Kovaleva, Rumshisky 2020),
  the slides presented by M. Valipour (CS 886, University of Waterloo);
* ``Convexity``: "The Convexity of BERT: From Cause to Solution" (Modarressi and Mohebbi 2020), its Table 2;
* ``BERT lecture``: the BERT lecture slides (ELMo/GPT/BERT, fine-tuning);
* ``Dark Secrets``: "The Dark Secrets of BERT" (the blog post of Kovaleva et al. 2019);
* ``BERT Vision``: Jiang and King, "BERT Vision".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from bertology.claims import checks
from bertology.claims.verdicts import Verdict

SEEDS = {
    "Primer": "A Primer in BERTology (Rogers et al. 2020), slides by M. Valipour",
    "Convexity": "The Convexity of BERT (Modarressi and Mohebbi 2020)",
    "BERT lecture": "BERT lecture slides",
    "Dark Secrets": "The Dark Secrets of BERT (Kovaleva et al. 2019, blog post)",
    "BERT Vision": "BERT Vision (Jiang and King)",
}


@dataclass(frozen=True)
class Claim:
    """One published claim and how a run's tables judge it."""

    id: str
    statement: str
    seed: str
    paper: str
    tables: str
    statistic: str
    direction: str
    rule: str
    check: Callable[..., Verdict]
    paper_number: str = ""

    @property
    def seed_title(self) -> str:
        return SEEDS[self.seed]


CLAIMS: tuple[Claim, ...] = (
    Claim("hierarchical", "Representations are hierarchical rather than linear: a structural probe recovers "
          "the dependency tree better than the linear chain does.", "Primer", "Lin et al. 2019; Hewitt and "
          "Manning 2019", "probing.table2 (structural-distance)", "UUAS of the distance probe, test, layer "
          "chosen on dev", "above the linear chain's UUAS", "holds: 95% CI above the chain; does not hold: CI at "
          "or below it; cannot tell: CI covers it", checks.hierarchical),
    Claim("pos-decodable", "Parts of speech are linearly decodable from the embeddings.", "Primer",
          "Tenney et al. 2019; Liu et al. 2019", "probing.table2 (upos)", "UPOS test accuracy at the layer "
          "chosen on dev", "above the majority class, the control task and the untrained twin",
          "holds: the CI above majority and control and the CI of (model - twin) above 0; does not hold: one of "
          "them at or below; cannot tell: otherwise", checks.pos_decodable),
    Claim("deprel-decodable", "Syntactic roles (dependency labels) are linearly decodable.", "Primer",
          "Tenney et al. 2019; Liu et al. 2019", "probing.table2 (deprel)", "dependency-label test accuracy at "
          "the layer chosen on dev", "above the majority class, the control task and the untrained twin",
          "as pos-decodable", checks.deprel_decodable),
    Claim("syntax-partial", "Syntax knowledge is partial: probing fails for long-distance arcs.", "Primer",
          "Liu et al. 2019", "probing.arc_length (deprel), probing.table2", "dependency-label edge-probe test "
          "accuracy, adjacent arcs (1 word) minus the longest (9+ words), at the layer chosen on dev",
          "above 0: long arcs decoded worse", "holds: 95% CI of the drop above 0; does not hold: at or below 0; "
          "cannot tell: covers 0, or a bin under 30 test arcs", checks.arc_length),
    Claim("syntax-middle", "Syntactic information is most prominent in the middle layers.", "Primer",
          "Liu et al. 2019", "probing.table2 (syntactic tasks)", "relative depth l/L of each syntactic task's "
          "layer chosen on dev (median shown)", "inside 0.25-0.75", "holds: more than half of the tasks above "
          "chance peak in the middle with every indistinguishable layer; does not hold: more than half peak "
          "outside it; cannot tell: otherwise", checks.middle_layers),
    Claim("word-order-lower", "Lower layers hold the most linear word-order information.", "Primer",
          "Lin et al. 2019", "probing.table2 (position)", "position-probe test accuracy (each word's position, "
          "0-15 and 16+), the lower half's best transformer layer minus the upper half's (each chosen on dev)",
          "above 0", "holds: 95% CI above 0; does not hold: at or below 0; cannot tell: covers 0, or positions "
          "at chance", checks.word_order_lower, "decrease of linear word-order knowledge around layer 4 of "
          "BERT-base"),
    Claim("top-layers-task-specific", "The final layers are the most task-specific: they change most in "
          "fine-tuning.", "BERT lecture", "Primer (Liu et al. 2019; Kovaleva et al. 2019)", "compare.cka "
          "(interventions section)", "linear CKA per layer (all tokens), model before vs after fine-tuning on a "
          "task it learned", "lowest at the last layer",
          "holds: the last layer's CKA is the lowest and below the lower half's mean; does not hold: at or "
          "above the other layers' median; cannot tell: between", checks.finetuning_top_layers,
          "large weight changes in the last layer, smaller lower down"),
    Claim("contextual-with-depth", "Representations grow more contextual with depth.", "Primer",
          "Ethayarajh 2019", "knowledge.contextuality (+ types)", "adjusted self-similarity, last minus first "
          "transformer layer, paired over words", "below 0", "holds: 95% CI over words below 0; does not hold: "
          "at or above 0; cannot tell: covers 0", checks.contextual_with_depth),
    Claim("anisotropic", "Representations are anisotropic, more so in upper layers.", "Primer",
          "Ethayarajh 2019", "knowledge.contextuality", "mean cosine of random word pairs, last layer",
          "above 0.1 and above the first layer's", "holds: above 0.1 and rising; does not hold: at or below "
          "0.1; cannot tell: above 0.1 but not rising (no interval: one sample of random pairs)",
          checks.anisotropic),
    Claim("syntactic-heads", "Some attention heads specialise in syntactic relations, beyond positional "
          "baselines.", "Primer", "Clark et al. 2019; Htut et al. 2019", "attention.best_heads",
          "per relation of Clark et al.'s Table 1 with >= 30 test words: test accuracy of the head chosen on dev",
          "above the best fixed "
          "offset", "holds: some relation's CI (Wilson, Bonferroni over relations) above its offset baseline; "
          "does not hold: every relation's own 95% CI at or below; cannot tell: otherwise", checks.syntactic_heads),
    Claim("no-single-head", "No single head holds the whole syntactic tree.", "Primer", "Clark et al. 2019; "
          "Htut et al. 2019", "attention.best_heads (all), attention.probe_summary", "UAS of the best single "
          "head over all relations, test", "below the attention-only probe's UAS", "holds: CI below the probe; "
          "does not hold: at or above; cannot tell: covers it", checks.no_single_head),
    Claim("heterogeneous-minority", "Most heads show non-linguistic patterns: fewer than half of the maps are "
          "heterogeneous.", "Dark Secrets", "Kovaleva et al. 2019 (Primer)", "attention.patterns",
          "share of heterogeneous maps, mean over heads", "below one half", "holds: 95% CI over heads below "
          "0.5; does not hold: at or above; cannot tell: covers it", checks.heterogeneous_minority,
          "less than half heterogeneous"),
    Claim("heads-alike", "Heads in the same layer show similar attention patterns.", "Primer",
          "Clark et al. 2019", "attention.statistics", "mean distance within layers / across layers between "
          "heads' attention statistics", "below the shuffled-layers null", "holds: below the 2.5th percentile "
          "of 999 shuffles; does not hold: at or above their median; cannot tell: between", checks.heads_alike),
    Claim("syntax-heads-unneeded", "Heads that track linguistic relations need not matter for a task.",
          "Primer", "Kovaleva et al. 2019", "interventions.flagged_summary, flagged_runs", "change in the "
          "fine-tuned metric when the heads flagged as parsers are masked", "no worse than random head sets",
          "holds: empirical p >= 0.05 with >= 19 draws; does not hold: p < 0.05; cannot tell: fewer draws, or "
          "the task not learned", checks.syntax_heads_unneeded),
    Claim("heads-prunable", "A large share of heads can be pruned with little loss.", "Primer",
          "Michel et al. 2019; Voita et al. 2019", "interventions.curve", "metric lost with half of the heads "
          "masked, least important first", "below 5 points", "holds: 95% CI below 5 points; does not hold: at "
          "or above; cannot tell: covers it", checks.prunable),
    Claim("harmful-heads", "Some heads are harmful to a task: removing them helps.", "Primer",
          "Michel et al. 2019", "interventions.curve", "largest gain of the metric from masking heads",
          "above 0", "holds: some masked share raises the metric (95% CI above 0); cannot tell: otherwise "
          "(heads are not masked one by one in the report)", checks.harmful_heads),
    Claim("agreement", "Subject-predicate agreement is respected in the cloze task (MLM models).", "Primer",
          "Goldberg 2019", "knowledge.pairs.paradigms", "minimal-pair accuracy on agreement paradigms",
          "above chance (0.5)", "holds: 95% CI above 0.5; does not hold: at or below; cannot tell: covers it, "
          "or no MLM head", checks.agreement),
    Claim("lama", "For some relations an MLM recalls facts well enough to compete with knowledge bases.",
          "Primer", "Petroni et al. 2019", "knowledge.lama.corpora", "LAMA P@1 (mean over relations, pooled "
          "by facts)", "above the untrained twin", "holds: 95% CI above the twin's P@1; does not hold: at or "
          "below; cannot tell: covers it, or no MLM head", checks.lama_facts),
    Claim("numerals-split", "Numbers are poorly represented, perhaps because WordPiece splits them.",
          "Primer", "Wallace et al. 2019", "tokenization.by_upos", "subwords per numeral / subwords per word",
          "at least 1.2", "holds: >= 1.2; does not hold: <= 1.0; cannot tell: between (a corpus count, no "
          "interval)", checks.numerals_split),
    Claim("numbers-wordpiece", "Numbers that WordPiece splits are decoded worse than numbers it keeps whole.",
          "Primer", "Wallace et al. 2019", "knowledge.numeracy.layers", "mean absolute decoding error, split "
          "minus whole numbers, within each hundred (layer chosen on dev)", "above 0", "holds: 95% CI above 0; "
          "does not hold: at or below 0; cannot tell: covers 0, or the probe does not beat the training mean",
          checks.numbers_wordpiece),
    Claim("untrained-surface", "An untrained model already gives much of the surface information.",
          "Convexity", "Modarressi and Mohebbi 2020, Table 2", "probing.table2 (sentence_length)",
          "untrained twin's SentLen accuracy at the trained model's chosen layer",
          "above majority + half of the trained model's gain", "holds: CI of the trained-twin gap below half "
          "the gain; does not hold: at or above; cannot tell: covers it", checks.untrained_surface,
          "SentLen layer 1: 93.9, untrained 91.9"),
    Claim("surface-lower", "Surface information (sentence length) peaks in the lower layers and fades "
          "upwards.", "Convexity", "Modarressi and Mohebbi 2020, Table 2 (after Jawahar et al. 2019)",
          "probing.table2 (sentence_length)", "chosen layer's accuracy minus the last layer's",
          "chosen layer in the lower half, difference above 0", "holds: lower half and CI above 0; does not "
          "hold: upper half, or CI at or below 0; cannot tell: CI covers 0", checks.surface_lower,
          "SentLen 96.2 at layer 3, 69.5 at layer 12"),
    Claim("tense-learned", "Semantic information (tense) is learned in pre-training, beyond an untrained "
          "model.", "Convexity", "Modarressi and Mohebbi 2020, Table 2", "probing.table2 (past_present)",
          "Tense accuracy minus the untrained twin's at the chosen layer", "above 0", "holds: CI of the "
          "difference above 0; does not hold: at or below; cannot tell: covers 0", checks.semantic_beyond_twin,
          "Tense 90.0 at layer 9, +28.0 over untrained"),
    Claim("quantization", "8-bit quantization keeps about 99% of the performance.", "Primer",
          "Zafrir et al. 2019 (Q8BERT), Primer Table 1", "compression.summary", "int8 retention of UPOS, UUAS "
          "and parser heads", "every retention above 97%", "holds: every 95% CI above 0.97; does not hold: one "
          "below; cannot tell: otherwise, or the compression section not run", checks.quantization,
          "99% (x4 smaller)"),
    Claim("language-identity", "A multilingual model encodes language identity.", "Primer",
          "Wu and Dredze 2019; Libovický et al. 2019", "languages.identity_summary", "language-identity test "
          "accuracy at the layer chosen on dev", "above the majority class and the untrained twin",
          "holds: 95% CI above both; does not hold: at or below one; cannot tell: covers it, or no languages "
          "given", checks.language_identity),
    Claim("zero-shot", "A multilingual model transfers zero-shot (an English probe works on other languages).",
          "Primer", "Wu and Dredze 2019; Pires et al. 2019", "languages.transfer_best (upos)", "zero-shot UPOS "
          "accuracy per language", "above the majority class and the twin", "holds: more than half of the "
          "languages' CIs above; does not hold: more than half at or below; cannot tell: otherwise, or no "
          "languages given", checks.zero_shot),
)

CLAIM_IDS: tuple[str, ...] = tuple(claim.id for claim in CLAIMS)


def claim(claim_id: str) -> Claim:
    for entry in CLAIMS:
        if entry.id == claim_id:
            return entry
    raise KeyError(f"no claim {claim_id!r}; expected one of {', '.join(CLAIM_IDS)}")
