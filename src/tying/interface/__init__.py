"""Token interfaces: `Untied`, `TransposeTying`, `PseudoInverseTying` (see `base` for notation)."""

from tying.interface.base import TokenInterface
from tying.interface.factory import TIES, build_interface, check_tie
from tying.interface.loss import linear_cross_entropy
from tying.interface.pit import PseudoInverseTying
from tying.interface.transpose import TransposeTying, scale_grad
from tying.interface.untied import Untied

__all__ = [
    "TIES",
    "PseudoInverseTying",
    "TokenInterface",
    "TransposeTying",
    "Untied",
    "build_interface",
    "check_tie",
    "linear_cross_entropy",
    "scale_grad",
]
