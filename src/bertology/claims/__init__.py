"""`bertology claims`: the Primer as a checklist. Each BERTology claim of the seed documents, judged on one
model's result tables (holds / does not hold / cannot tell, with its number, baseline and interval)."""

from bertology._lazy import lazy_exports

__getattr__ = lazy_exports(__name__, {
    "evaluate": ("check_claims", "compare_claims", "display_frame"),
    "registry": ("CLAIMS", "CLAIM_IDS", "Claim", "claim"),
    "verdicts": ("Verdict", "HOLDS", "FAILS", "UNKNOWN"),
})

__all__ = ["CLAIMS", "CLAIM_IDS", "Claim", "FAILS", "HOLDS", "UNKNOWN", "Verdict", "check_claims", "claim",
           "compare_claims", "display_frame"]
