"""Every experiment's settings are one frozen spec, checked once when it is made (issue 34): a bad setting is one
SettingError naming it, and the experiment functions still take the spec's fields as keywords."""

from __future__ import annotations

import dataclasses

import pytest

from bertology.errors import SettingError, UsageError
from bertology.settings import spec_of


def _refused(make, setting: str) -> SettingError:
    with pytest.raises(SettingError) as caught:
        make()
    assert caught.value.setting == setting and str(caught.value).startswith(setting), str(caught.value)
    return caught.value


def test_spec_of_takes_a_spec_or_its_fields_and_names_an_unknown_one():
    from bertology.compression.spec import CompressionSpec

    assert spec_of(CompressionSpec, None, {"rounds": 2}, "compression").rounds == 2
    given = CompressionSpec(rounds=2)
    assert spec_of(CompressionSpec, given, {}, "compression") is given
    assert spec_of(CompressionSpec, given, {"seed": 3}, "compression") == CompressionSpec(rounds=2, seed=3)
    with pytest.raises(UsageError, match="unknown compression setting.*roundz"):
        spec_of(CompressionSpec, None, {"roundz": 2}, "compression")
    with pytest.raises(UsageError, match="expected a CompressionSpec"):
        spec_of(CompressionSpec, {"rounds": 2}, {}, "compression")


def test_compression_spec_refuses_bad_settings():
    from bertology.compression.spec import CompressionSpec, MeasureSpec

    error = _refused(lambda: CompressionSpec(rounds=0), "rounds")
    assert str(error.as_option()) == "--rounds 0: expected at least 1"
    _refused(lambda: CompressionSpec(calibration_sentences=0), "calibration_sentences")
    _refused(lambda: CompressionSpec(structural_epochs=0), "structural_epochs")
    _refused(lambda: MeasureSpec(structural_lr=0), "structural_lr")
    _refused(lambda: MeasureSpec(upos_l2=()), "upos_l2")
    assert CompressionSpec(finetune_task="SST-2").finetune_task == "sst2"
    assert CompressionSpec(seed=4, structural_rank=8).measure() == MeasureSpec(seed=4, structural_rank=8)
    assert dataclasses.is_dataclass(CompressionSpec) and CompressionSpec.__dataclass_params__.frozen


def test_contextuality_spec_refuses_bad_settings():
    from bertology.geometry.spec import ContextualitySpec

    error = _refused(lambda: ContextualitySpec(min_count=1), "min_count")
    assert str(error) == "min_count 1: a word type needs at least 2 occurrences to compare"
    assert str(error.as_option()).startswith("--min-count 1")
    _refused(lambda: ContextualitySpec(samples=1), "samples")
    _refused(lambda: ContextualitySpec(max_pairs=0), "max_pairs")
    _refused(lambda: ContextualitySpec(seeds=()), "seeds")
    _refused(lambda: ContextualitySpec(layers="3-1"), "layers")
    assert ContextualitySpec(seeds=[1, 2]).seeds == (1, 2) and ContextualitySpec(max_pairs=None).max_pairs is None


def test_mlm_probe_spec_refuses_bad_settings_and_the_option_is_named_as_before():
    from bertology.knowledge.spec import MLMProbeSpec

    assert str(_refused(lambda: MLMProbeSpec(epochs=0), "epochs").as_option()) == \
        "--epochs 0: expected a whole number of at least 1"
    assert str(_refused(lambda: MLMProbeSpec(decoder="pretrained"), "decoder").as_option()) == \
        "--decoder 'pretrained': expected one of tied, untied"
    _refused(lambda: MLMProbeSpec(dropout=1.0), "dropout")
    _refused(lambda: MLMProbeSpec(lr=0), "lr")
    _refused(lambda: MLMProbeSpec(corrupt="none"), "corrupt")
    _refused(lambda: MLMProbeSpec(seeds=()), "seeds")
    _refused(lambda: MLMProbeSpec(max_test=0), "max_test")


def test_lama_and_knowledge_section_specs_refuse_bad_settings():
    from bertology.knowledge.spec import KnowledgeSectionSpec, LamaSpec

    _refused(lambda: LamaSpec(batch_size=0), "batch_size")
    _refused(lambda: LamaSpec(max_facts=0), "max_facts")
    _refused(lambda: LamaSpec(layers="x"), "layers")
    assert LamaSpec(seeds=(), untrained=False).seeds == ()  # no twin, no seed needed
    _refused(lambda: KnowledgeSectionSpec(lama_facts=0), "lama_facts")
    _refused(lambda: KnowledgeSectionSpec(mlm_probe_sentences=-1), "mlm_probe_sentences")
    assert KnowledgeSectionSpec(mlm_probe_sentences=0).settings()["mlm_probe_sentences"] == 0
    assert KnowledgeSectionSpec(seeds=[3]).settings() == {"max_sentences": 400, "mlm_probe_sentences": 300,
                                                          "mlm_probe_epochs": 1, "lama_facts": 50, "pairs_max": 200,
                                                          "seeds": [3]}


def test_attention_parse_spec_refuses_bad_settings():
    from bertology.attention.spec import AttentionParseSpec

    _refused(lambda: AttentionParseSpec(probe_epochs=0), "probe_epochs")
    _refused(lambda: AttentionParseSpec(max_eval=0), "max_eval")
    _refused(lambda: AttentionParseSpec(min_count=-1), "min_count")
    assert AttentionParseSpec(probe_seeds=[]).probe_seeds == ()  # no seeds: no probe


def test_cluster_spec_refuses_bad_settings():
    from bertology.scale.spec import ClusterSpec

    _refused(lambda: ClusterSpec(workers=0), "workers")
    _refused(lambda: ClusterSpec(cpus_per_worker=0), "cpus_per_worker")
    _refused(lambda: ClusterSpec(gpus_per_worker=-1), "gpus_per_worker")


def test_structural_spec_refuses_bad_settings():
    from bertology.probing.spec import StructuralSpec

    assert str(_refused(lambda: StructuralSpec(punct="bogus"), "punct")) == \
        "punct 'bogus': expected one of upos, xpos, none"
    _refused(lambda: StructuralSpec(kinds=("width",)), "kinds")
    _refused(lambda: StructuralSpec(seeds=()), "seeds")
    _refused(lambda: StructuralSpec(rank=0), "rank")
    _refused(lambda: StructuralSpec(lr=0.0), "lr")


def test_probe_labels_spec_refuses_bad_settings():
    from bertology.probing.spec import ProbeLabelsSpec

    _refused(lambda: ProbeLabelsSpec(probe="forest"), "probe")
    _refused(lambda: ProbeLabelsSpec(seeds=()), "seeds")
    _refused(lambda: ProbeLabelsSpec(train_fraction=0), "train_fraction")
    _refused(lambda: ProbeLabelsSpec(train_sampling="some"), "train_sampling")
    _refused(lambda: ProbeLabelsSpec(mdl_timestamps=(0.5, 0.2)), "mdl_timestamps")
    _refused(lambda: ProbeLabelsSpec(n_boot=0), "n_boot")
