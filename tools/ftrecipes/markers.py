"""Generated sections inside hand-written Markdown, between marker comments.

A README keeps its prose; only the text between
``<!-- ftrecipes:NAME:begin -->`` and ``<!-- ftrecipes:NAME:end -->`` is the tool's.
"""

import re


def replace(text, name, content):
    """Text with the NAME section's body replaced; unchanged when the markers are absent."""
    pattern = re.compile(
        rf"(<!-- ftrecipes:{re.escape(name)}:begin -->\n)(.*?)(<!-- ftrecipes:{re.escape(name)}:end -->)",
        re.S,
    )
    body = content if content.endswith("\n") or not content else content + "\n"
    return pattern.sub(lambda m: m.group(1) + body + m.group(3), text, count=1)


def has(text, name):
    return f"<!-- ftrecipes:{name}:begin -->" in text and f"<!-- ftrecipes:{name}:end -->" in text
