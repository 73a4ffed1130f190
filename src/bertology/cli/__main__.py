"""``python -m bertology.cli``: the `bertology` command."""

from bertology.cli import main

main()
