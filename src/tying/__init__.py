"""tying: the token interface of language models.

The input embedding E (V×d) and the output projection W_out (d×V), built three
ways (untied, transpose-tied, pseudo-inverse-tied), trained and measured.
"""

from tying.interface import (
    PseudoInverseTying,
    TokenInterface,
    TransposeTying,
    Untied,
    build_interface,
    linear_cross_entropy,
)

__version__ = "0.1.0"

__all__ = [
    "PseudoInverseTying",
    "TokenInterface",
    "TransposeTying",
    "Untied",
    "__version__",
    "build_interface",
    "linear_cross_entropy",
]
