"""Read launch scripts: the commands they run and the flags each command gets, with lines.

Not a shell: enough to find `torchrun ... -m openrlhf.cli.train_sft --flag value` and
`accelerate launch --config_file x.yaml` in the scripts people write, and to point
at the line of each flag.
"""

import re
import shlex
from dataclasses import dataclass, field


@dataclass
class Command:
    line: int  # first line of the (possibly continued) command
    words: list  # shell words, after quote removal
    word_lines: list  # line of each word
    env: dict = field(default_factory=dict)  # VAR=value prefixes


def commands(text):
    """Yield Commands of a script: continued lines joined, comments dropped."""
    # Only "\n" ends a line in a shell script (str.splitlines also splits on \x1e, \x85, U+2028...,
    # which may sit inside a quoted word).
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        start = i
        parts = []
        while True:
            raw = lines[i] if i < len(lines) else ""
            stripped = raw.rstrip()
            cont = stripped.endswith("\\") and not stripped.endswith("\\\\")
            parts.append((i + 1, stripped[:-1] if cont else stripped))
            i += 1
            if not cont or i >= len(lines):
                break
        words, word_lines = [], []
        for lineno, chunk in parts:
            toks = _words(chunk)
            words.extend(toks)
            word_lines.extend([lineno] * len(toks))
        if not words:
            continue
        # Split on ; && || | so "cd x && torchrun ..." yields both commands.
        current, current_lines = [], []
        for w, ln in zip(words + [Operator(";")], word_lines + [word_lines[-1]]):
            if isinstance(w, Operator):
                if current:
                    yield _command(current, current_lines, start + 1)
                current, current_lines = [], []
            else:
                current.append(w)
                current_lines.append(ln)


class Operator(str):
    """An unquoted control operator (; && || | &), as opposed to a quoted word '|'."""


OPERATORS = (";", "&&", "||", "|", "&")


def _words(chunk):
    """Shell words of one line, quotes removed; unquoted operators come back as Operator.

    A non-POSIX lexer keeps the quotes, which is how a quoted '|' is told from a pipe;
    each word is then unquoted the POSIX way.
    """
    try:
        lexer = shlex.shlex(chunk, posix=False, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        raw = list(lexer)
    except ValueError:
        raw = chunk.split()
    out = []
    for tok in raw:
        if tok in OPERATORS:
            out.append(Operator(tok))
            continue
        try:
            parts = shlex.split(tok, comments=False, posix=True)
        except ValueError:
            parts = [tok]
        out.append("".join(parts) if parts else "")
    return out


_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _command(words, lines, start):
    env = {}
    idx = 0
    while idx < len(words) and _ASSIGN.match(words[idx]):
        k, v = words[idx].split("=", 1)
        env[k] = v
        idx += 1
    return Command(line=lines[0] if lines else start, words=words[idx:], word_lines=lines[idx:], env=env)


def flags_after(cmd, index):
    """Parse `--name value`, `--name=value` and `--name` (a switch) words after position index.

    A flag followed by several words gets a list. Returns ({name: (value, line)},
    [(name, line) repeated]); a repeated flag keeps
    the last value, as argparse does.
    """
    out, dups = {}, []
    words = cmd.words
    i = index
    while i < len(words):
        word = words[i]
        if not word.startswith("--") or word == "--":
            i += 1
            continue
        line = cmd.word_lines[i]
        name, value = word[2:], True
        if "=" in name:
            name, value = name.split("=", 1)
        else:
            # Every word up to the next flag belongs to this one (`--adam.betas 0.9 0.95`).
            taken = []
            while i + 1 < len(words) and not words[i + 1].startswith("--"):
                taken.append(words[i + 1])
                i += 1
            if taken:
                value = taken[0] if len(taken) == 1 else taken
        if name in out:
            dups.append((name, line))
        out[name] = (value, line)
        i += 1
    return out, dups


def find_module(cmd, prefix):
    """Index of the word naming a Python module that starts with prefix (after -m/--module), or None."""
    for i, w in enumerate(cmd.words):
        if w.startswith(prefix) and i > 0 and cmd.words[i - 1] in ("-m", "--module"):
            return i
        if w.startswith(prefix) and w.endswith(".py") is False and "/" not in w and i > 0 and cmd.words[i - 1].endswith("python"):
            return i
    return None


def column(lines, line, needle):
    """1-based column of needle on a line; lines = text.split("\\n"), numbered as commands() numbers them."""
    if 0 < line <= len(lines):
        pos = lines[line - 1].find(needle)
        if pos >= 0:
            return pos + 1
    return 1
