"""The report's section ids, in a module that imports nothing heavy, so that ``bertology report --sections``
is checked before torch loads. :data:`bertology.report.sections.SECTIONS` pairs each id with its builder."""

from __future__ import annotations

from collections.abc import Sequence

from bertology.errors import SettingError

#: Section id -> its title, in reading order; each id is the name of its builder in
#: :mod:`bertology.report.sections` (the builders and the boxes that stand in for them use these titles).
SECTION_TITLES = {
    "tokenization": "Tokenization", "probing": "Probing", "attention": "Attention",
    "interventions": "Whether it uses it: interventions", "knowledge": "Knowledge and geometry",
    "languages": "Languages", "compression": "Compression",
}
SECTION_NAMES: tuple[str, ...] = tuple(SECTION_TITLES)
#: Sections the default report only describes (how to add them), computed when asked by these options.
ON_REQUEST = {"languages": "--languages DIR", "compression": "--sections compression"}


def check_sections(sections: Sequence[str] | None, valid: Sequence[str] = SECTION_NAMES) -> list[str] | None:
    """The requested section ids, or :class:`UsageError` naming the unknown ones and the ``valid`` ones."""
    if sections is None:
        return None
    chosen = [s.strip() for s in sections if s.strip()]
    unknown = [s for s in chosen if s not in valid]
    if unknown or not chosen:
        raise SettingError("sections", sections, f"unknown section {', '.join(unknown) or '(none given)'}; expected "
                           f"one or more of {', '.join(valid)}", shown=",".join(sections))
    return chosen
