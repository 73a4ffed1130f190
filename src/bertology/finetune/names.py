"""Names of a fine-tuning checkpoint's files, in a module that imports nothing heavy, so that the CLI can check a
folder before torch loads."""

from __future__ import annotations

#: Written beside the weights of every checkpoint; its presence marks a finished one.
CHECKPOINT_META = "finetune.json"
