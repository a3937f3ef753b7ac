"""A finding: one problem at one place in one file."""

from dataclasses import asdict, dataclass

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
        return (self.path, self.line, self.column, self.rule, self.message)
