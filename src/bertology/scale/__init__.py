"""Scale-out on a Ray cluster (``--engine ray``): extraction with Ray Data, fine-tuning sweeps with Ray tasks.

Nothing here imports Ray at import time; :func:`~bertology.scale.cluster.require_ray` does, when an engine
runs, and says how to install the extra when it is missing (``pip install 'bertology[ray]'``).
"""

from bertology.scale.cluster import ENGINES, INSTALL_HINT, check_engine, connect, require_ray

__all__ = ["ENGINES", "INSTALL_HINT", "check_engine", "connect", "extract_ray", "finetune_sweep_ray", "require_ray"]


def __getattr__(name: str):
    if name == "extract_ray":
        from bertology.scale.extraction import extract_ray

        return extract_ray
    if name == "finetune_sweep_ray":
        from bertology.scale.sweeps import finetune_sweep_ray

        return finetune_sweep_ray
    raise AttributeError(name)
