"""Shared helpers for the ftrecipes schema generators (run inside scratch venvs, not at lint time)."""
import ast
import inspect
import json
import textwrap
from pathlib import Path

DRAFT = "https://json-schema.org/draft/2020-12/schema"
REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "schemas"


def header(file_name, title, description):
    return {
        "$schema": DRAFT,
        "$id": f"https://ftrecipes.dev/schemas/{file_name}",
        "title": title,
        "description": description,
    }


def attribute_docstrings(cls):
    """Map attribute name -> docstring written right after its annotated assignment (whole MRO)."""
    docs = {}
    for klass in reversed(cls.__mro__):
        try:
            src = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        tree = ast.parse(src)
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, nxt in zip(body, body[1:] + [None]):
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                        and isinstance(nxt.value.value, str)):
                    docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def short(text, limit=400):
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def write(schema, file_name):
    path = SCHEMAS / file_name
    path.write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {path} ({len(schema.get('properties', {}))} top-level keys)")
