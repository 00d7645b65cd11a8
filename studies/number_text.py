"""How a number is written in the prose of the docs: the one pattern that the extractor
(`studies.numbers`) and the default-tier (`studies.numbers_defaults`) both read numbers with."""

from __future__ import annotations

import re

#: A number as printed: digits with thousands separators, decimals and an exponent whose sign may
#: be a Unicode minus ("1,064,960", "47.7", "5.7e-7", "2.601e5", "1e−4"); a sign before it is
#: not part of it.
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?(?:[eE][−-]?\d+)?")
