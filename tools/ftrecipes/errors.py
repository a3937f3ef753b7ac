"""One kind of error for bad input: printed as a single line, exit status 2."""

import re


# What str.splitlines() breaks on: a value echoed in a message must not start a new line.
_BREAKS = {c: repr(chr(c))[1:-1] for c in (0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029)}


_ANY_BREAK = re.compile("[" + "".join(map(chr, _BREAKS)) + "]")


def has_breaks(text):
    """True when text holds a character one_line() would escape."""
    return _ANY_BREAK.search(text) is not None


def one_line(text):
    """text with line breaks written as escapes (\\n, \\r, \\x85, \\u2028, ...)."""
    text = str(text)
    # translate() walks every character in Python's slow path; most lines hold no break at all.
    return text.translate(_BREAKS) if _ANY_BREAK.search(text) else text


# A message may quote a value from the user's file (jsonschema's quote whole instances):
# one line of a report stays readable, whatever the file held.
MAX_MESSAGE = 1000


def clip(text, limit=60):
    """text, cut to limit characters with a note of how long it was."""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


class UserError(Exception):
    """Bad input from the user (a file, a --set value, a recipe name).

    The CLI prints ``str(err)`` on one line and exits 2; no traceback, because the
    fix is in the input, not in our code.
    """

    exit_code = 2

    def __init__(self, message, path=None, line=None, column=None, key=None):
        self.message = message
        self.path = path
        self.line = line
        self.column = column
        self.key = key
        super().__init__(self.format())

    def format(self):
        where = ""
        if self.path is not None:
            where = str(self.path)
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        key = f"{clip(self.key, 200)}: " if self.key else ""
        return one_line(f"{where}{key}{clip(self.message, MAX_MESSAGE)}")
