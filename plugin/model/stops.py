"""Why a walk ended: the stop reasons scripts see in JSON, each with its description."""
from __future__ import annotations

from plugin.model.vocabulary import Vocabulary


class StopReason(Vocabulary):
    OUTERMOST = ("outermost", "outermost frame (a table marks it so, the registers show the child side of "
                              "clone, or the stack above it holds no return address)")
    PC_ZERO = ("pc-zero", "return address is 0: outermost frame")
    CFA_NOT_INCREASING = ("cfa-not-increasing", "the caller's CFA does not increase")
    REPEATED_FRAME = ("repeated-frame", "a frame repeats: the stack loops")
    UNREADABLE_MEMORY = ("unreadable-memory", "memory needed to unwind cannot be read")
    DEPTH_LIMIT = ("depth-limit", "depth limit reached")
    NO_UNWIND_INFO = ("no-unwind-info", "no source could recover the caller")
    RETURN_ADDRESS_NOT_CODE = ("return-address-not-code",
                               "the recovered return address is not in executable memory")
    MISALIGNED_STACK = ("misaligned-stack",
                        "the stack pointer or frame pointer is misaligned: the registers or the stack are damaged")
    LIMIT = ("limit", "stopped after the number of frames asked for")
    STACK_SWITCH = ("stack-switch", "a runtime switched stacks here: the caller's frames are on another stack, "
                                    "which this walk does not follow")


def describe(reason: str) -> str:
    """The description of a stop reason, or the reason itself when it is not one of ours."""
    try:
        return StopReason(reason).description
    except ValueError:
        return reason
