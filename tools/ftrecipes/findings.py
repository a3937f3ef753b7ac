"""A finding: one problem at one place in one file."""

from dataclasses import asdict, dataclass
from itertools import islice
from operator import attrgetter, lt

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    column: int
    rule: str
    severity: str
    message: str

    def as_dict(self):
        return asdict(self)

    def sort_key(self):
        return SORT_KEY(self)


# The order findings are reported in, and what makes two of them the same finding. Done in C:
# a generated file can hold hundreds of thousands of findings, each keyed several times.
SORT_KEY = attrgetter("path", "line", "column", "rule", "message")


def ordered(findings):
    """Findings without repeats, in report order."""
    keys = list(map(SORT_KEY, findings))
    if all(map(lt, keys, islice(keys, 1, None))):  # already in order, hence no repeats (one file's, mostly)
        return list(findings)
    # Keys are unique in the dict, so sorting its items never compares two findings.
    return [f for _, f in sorted(dict(zip(keys, findings)).items())]
