"""A recipe on disk: recipe.yaml, values.schema.json, templates/, rendered/."""

import functools
from dataclasses import dataclass
from pathlib import Path

from . import paths, schemas, sources, versions
from .errors import UserError


@dataclass(frozen=True)
class RecipeFile:
    name: str
    template: str
    format: str
    primary: bool = False
    executable: bool = False
    when: str | None = None
    description: str = ""
    variants: tuple = ()  # ({"versions": {framework: range}, "template": name}, ...): first match wins

    def template_for(self, framework_versions):
        """The template to render at these framework versions: the first variant whose ranges
        all contain the version in use, else the file's own template."""
        for variant in self.variants:
            ranges = variant["versions"]
            if all(fw in framework_versions and versions.in_range(framework_versions[fw], r) for fw, r in ranges.items()):
                return variant["template"]
        return self.template


@dataclass(frozen=True)
class Recipe:
    name: str
    dir: Path
    meta: dict
    doc: sources.Document  # recipe.yaml with positions, for error messages
    files: tuple

    @property
    def version(self):
        return self.meta["version"]

    @property
    def defaults(self):
        return self.meta["values"]

    @property
    def primary(self):
        return next((f for f in self.files if f.primary), self.files[0])

    @property
    def yaml_path(self):
        return self.dir / "recipe.yaml"

    @property
    def values_schema_path(self):
        return self.dir / "values.schema.json"

    @functools.cached_property
    def values_schema(self):
        return schemas.load_recipe_schema(self.values_schema_path)

    def file(self, name):
        for f in self.files:
            if f.name == name:
                return f
        names = ", ".join(f.name for f in self.files)
        raise UserError(f"recipe {self.name} has no file '{name}' (files: {names}){schemas.suggest(name, [f.name for f in self.files])}")

    def label(self):
        return f"{self.name}@{self.version}"

    @property
    def supported_versions(self):
        """{framework: [range, ...]} from framework.supported_versions (a string or a list)."""
        out = {}
        for fw, ranges in self.meta["framework"].get("supported_versions", {}).items():
            out[fw] = [ranges] if isinstance(ranges, str) else list(ranges)
        return out

    def framework_versions(self, values):
        """{framework: version} the rendered files target: the value `<framework>_version`
        when the recipe has one, else the version in tested_with."""
        out = {}
        names = set(self.supported_versions) | set(self.meta.get("tested_with", {}))
        for fw in sorted(names):
            v = values.get(f"{fw}_version", self.meta.get("tested_with", {}).get(fw))
            if v is not None:
                out[fw] = str(v)
        return out

    def check_versions(self, values):
        """UserError (one line) when a targeted framework version is outside the supported ranges."""
        targeted = self.framework_versions(values)
        for fw, ranges in self.supported_versions.items():
            v = targeted.get(fw)
            if v is None:
                continue
            try:
                ok = versions.in_range(v, ranges)
            except ValueError as exc:
                raise UserError(f"{self.name}: {fw} version: {exc}") from None
            if not ok:
                raise UserError(f"{self.name}: {fw} {v} is not supported; supported {fw} versions: {' | '.join(ranges)}")
        return targeted


def names():
    root = paths.recipes_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "recipe.yaml").is_file())


def _is_file(path):
    # A name longer than the file system allows (or otherwise unusable) is simply not a recipe.
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def load(name):
    """Load and validate a recipe by name (or a path to a recipe directory)."""
    candidate = Path(name)
    if ("/" in name or name.startswith(".")) and _is_file(candidate / "recipe.yaml"):
        directory = candidate
    else:
        directory = paths.recipes_dir() / name
        if not _is_file(directory / "recipe.yaml"):
            raise UserError(f"no recipe named '{name}'{schemas.suggest(name, names())} (see `ftrecipes list`)")
    return load_dir(directory)


@functools.lru_cache(maxsize=None)
def load_dir(directory):
    directory = Path(directory)
    path = directory / "recipe.yaml"
    doc = sources.parse_yaml(sources.read_text(path), str(path))
    if not isinstance(doc.data, dict):
        raise UserError("recipe.yaml must be a mapping", path=path, line=1)
    problems = schemas.check(doc, schemas.load_schema("recipe.schema.json"))
    if doc.duplicates:
        key, line, col = doc.duplicates[0]
        raise UserError("duplicate key", path=path, line=line, column=col, key=".".join(map(str, key)))
    if problems:
        p = problems[0]
        raise UserError(p.message, path=path, line=p.line, column=p.column)
    meta = doc.data
    if meta["name"] != directory.name:
        line, col = doc.where(("name",))
        raise UserError(f"name '{meta['name']}' differs from the folder name '{directory.name}'", path=path, line=line, column=col)
    files = tuple(RecipeFile(**dict(f, variants=tuple(f.get("variants", ())))) for f in meta["files"])
    for fw, ranges in Recipe(meta["name"], directory, meta, doc, files).supported_versions.items():
        for r in ranges:
            try:
                versions.specifier(r)
            except ValueError as exc:
                line, col = doc.where(("framework", "supported_versions", fw))
                raise UserError(f"framework.supported_versions.{fw}: {exc}", path=path, line=line, column=col) from None
    return Recipe(name=meta["name"], dir=directory, meta=meta, doc=doc, files=files)


def all_recipes():
    return [load(n) for n in names()]
