"""Attention analysis: Clark et al. 2019 head statistics and heads as parsers, Kovaleva et al. 2019 pattern
types, and an offline viewer."""
