"""Token interfaces: `Untied`, `TransposeTying`, `PseudoInverseTying` (see `base` for notation).

The classes register themselves by name (`tie`) when imported; `registry` maps names to
classes (`interface_class`, `build_interface`, `tie_of`, `ties`).
"""

# The classes register on import, in this order: untied, tt, pit.
# isort: off
from tying.interface.base import GradientSplit, TokenInterface
from tying.interface.loss import linear_cross_entropy
from tying.interface.untied import Untied
from tying.interface.transpose import TransposeTying, scale_grad
from tying.interface.pit import PseudoInverseTying
from tying.interface.model import InterfaceModel, is_interface_model
from tying.interface.registry import (
    build_interface,
    check_tie,
    interface_class,
    tie_of,
    ties,
)

# isort: on

#: The built-in interface names (`ties()` also lists interfaces registered later).
TIES = ties()

__all__ = [
    "TIES",
    "GradientSplit",
    "InterfaceModel",
    "PseudoInverseTying",
    "TokenInterface",
    "TransposeTying",
    "Untied",
    "build_interface",
    "check_tie",
    "interface_class",
    "is_interface_model",
    "linear_cross_entropy",
    "scale_grad",
    "tie_of",
    "ties",
]
