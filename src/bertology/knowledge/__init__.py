"""What the model knows: static-embedding similarity, the Convexity MLM probe, LAMA and minimal pairs."""

from bertology.knowledge.static import plan_static, plot_static, static_layer, static_similarity, u_shape

__all__ = ["plan_static", "plot_static", "static_layer", "static_similarity", "u_shape"]
