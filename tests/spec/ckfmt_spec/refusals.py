"""Refusals: every one names the FORMAT.md rule it enforces (.rule)."""
import os

from .layout import U64_MAX


# --- refusals ---------------------------------------------------------------

class Refusal(Exception):
    """The reader refuses a file or a request; .rule is the FORMAT.md rule id."""
    refusal = "refused"

    def __init__(self, rule, detail=""):
        super().__init__(f"{self.refusal} [{rule}] {detail}".rstrip())
        self.rule = rule


class Corrupt(Refusal):
    refusal = "corrupt"


class Unsupported(Refusal):
    """Valid perhaps, but beyond this reader: another major version (H2, F3),
    an unknown codec (D2), an index too costly to check (T3)."""
    refusal = "unsupported"


class Uncovered(Refusal):
    """T4: the request includes elements that no piece holds (§7.6)."""
    refusal = "uncovered"


class TooLarge(Refusal):
    """§12: the declared sizes need more memory than this machine has."""
    refusal = "too large"


def require(condition, rule, detail=""):
    if not condition:
        raise Corrupt(rule, detail)


def checked_product(values, rule, where):
    """The product of non-zero values, refused under `rule` past 2^64 - 1."""
    product = 1
    for v in values:
        product *= v
        require(product <= U64_MAX, rule, f"{where}: product overflows 64 bits")
    return product


def require_memory(nbytes, what):
    """§12: refuse, before allocating, what the machine cannot hold."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if nbytes > physical:
        raise TooLarge("§12", f"{what} needs {nbytes} bytes, more than this machine's {physical}")
