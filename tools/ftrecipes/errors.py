"""One kind of error for bad input: printed as a single line, exit status 2."""


def _escape(char):
    # Python's repr spelling (\x1b, \n, \u202e, \udcff): a reader can tell what the name held.
    return repr(char)[1:-1]


def needs_escape(text):
    """True when text holds a character one_line() would escape."""
    return not text.isprintable()


def one_line(text):
    """text with every character Python's repr escapes written as that escape: line breaks
    (\\n, \\x85, \\u2028, which would split a one-line message), terminal controls (ESC, BEL,
    the C1 CSI \\x9b, which a terminal would obey: a file named with them could recolour or clear
    the screen or forge a line of the report), bidirectional overrides (\\u202e, which reorder
    what the reader sees) and lone surrogates (undecodable bytes of a file name)."""
    text = str(text)
    # isprintable() is one pass in C; nearly every line is printable and stays as it is.
    return text if text.isprintable() else "".join(c if c.isprintable() else _escape(c) for c in text)


def printable(text):
    """Several lines of a human-readable report, each escaped as one_line() does."""
    return "\n".join(map(one_line, str(text).split("\n")))


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


# "-" means standard input or output to most tools; here no path argument reads or writes a
# stream (--svg, -o, --config, --values, lint's paths), so "-" would silently be a file or folder
# literally named "-". Refused the same way for every verb; "./-" still names such a file.
DASH_HINT = "not {stream} here; name a {what} (./- for one literally named '-')"


def refuse_dash(path, stream, what="file"):
    """UserError when path is "-" (stream: 'standard input' / 'standard output')."""
    if str(path) == "-":
        raise UserError(DASH_HINT.format(stream=stream, what=what), path="-")
