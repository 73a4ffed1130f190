"""Scale-out on a Ray cluster (``--engine ray``): extraction with Ray Data, fine-tuning sweeps with Ray tasks.

Nothing here imports Ray at import time; :func:`~bertology.scale.cluster.require_ray` does, when an engine
runs, and says how to install the extra when it is missing (``pip install 'bertology[ray]'``).
"""

from bertology._lazy import lazy_exports
from bertology.scale.cluster import ENGINES, INSTALL_HINT, check_engine, connect, require_ray

# The engines load torch and the capabilities they run: imported on first use (bertology._lazy).
__getattr__ = lazy_exports(__name__, {"extraction": ("extract_ray",), "sweeps": ("finetune_sweep_ray",)})

__all__ = ["ENGINES", "INSTALL_HINT", "check_engine", "connect", "extract_ray", "finetune_sweep_ray", "require_ray"]
