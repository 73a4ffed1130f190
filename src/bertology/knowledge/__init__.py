"""What the model knows: static-embedding similarity, the Convexity MLM probe, LAMA and minimal pairs."""

from bertology.knowledge.static import plan_static, plot_static, static_layer, static_similarity, u_shape

__all__ = ["plan_static", "plot_static", "static_layer", "static_similarity", "u_shape"]
from bertology.knowledge.mlm_probe import (  # noqa: E402
    LayerwiseMLMHead, evaluate_heads, input_dropout, mlm_probe, plot_mlm_probe, train_heads,
)

__all__ += ["LayerwiseMLMHead", "evaluate_heads", "input_dropout", "mlm_probe", "plot_mlm_probe", "train_heads"]
from bertology.knowledge.lama import lama, load_lama  # noqa: E402
from bertology.knowledge.mlm import load_masked_lm  # noqa: E402

__all__ += ["lama", "load_lama", "load_masked_lm"]
from bertology.knowledge.pairs import minimal_pairs, pseudo_log_likelihoods, read_pairs  # noqa: E402

__all__ += ["minimal_pairs", "pseudo_log_likelihoods", "read_pairs"]
from bertology.knowledge.section import KnowledgeSection, knowledge_section  # noqa: E402

__all__ += ["KnowledgeSection", "knowledge_section"]
