"""Keys of another framework release than the one in use (given, pinned by the repo, or the schema's)."""

from .. import pins, versions
from . import ERROR, rule


def config_versions(cfg, options):
    """The framework versions a config is judged at: --framework-version, then the repo's pins."""
    if getattr(cfg, "framework_versions", None) is not None:  # lint found them already
        return cfg.framework_versions
    return pins.versions_for(cfg.path, options.framework_versions, getattr(cfg, "root", None), cfg.kind)


@rule("framework-version", ERROR, "a key of another framework version than the one you run")
def framework_version(setup):
    """
    Frameworks rename and remove keys between releases, and a config written for one release
    fails (or is silently ignored) under another. Every key that schemas/versions.json tracks
    (renames, with the replacement) is checked against the version in use: given with
    `--framework-version NAME=VER` (repeatable), else the one the repository pins
    (requirements*.txt, pyproject.toml, setup.py, setup.cfg, environment.yml in the file's
    folder or a parent up to the repository root):

    - a key retired before VER is an error naming its replacement (OpenRLHF: "--flash_attn
      was replaced by --attn_implementation in openrlhf 0.8.10");
    - a key that only appears after VER is an error naming the spelling VER uses
      (`--ds.zero_stage` with openrlhf=0.9.2 -> `--zero_stage`);
    - a key deprecated at or before VER is a warning (transformers 5.23 `gradient_checkpointing`
      -> `activation_checkpointing`).

    Keys valid at VER that the format's schema (generated from another release) would call
    removed or unknown are not reported by the schema. Without a version the schemas' own
    release applies.
    """
    for cfg in setup.configs:
        fv = config_versions(cfg, setup.options)
        if not fv:
            continue
        for key, severity, message in versions.key_problems(cfg.data, cfg.kind, fv):
            yield cfg, (key,), message, severity


@rule("version-skew", ERROR, "a key the framework release in use does not have, or a later one drops")
def version_skew(setup):
    """
    schemas/key_history/ records, for DeepSpeed, transformers, TRL, accelerate, peft,
    LLaMA-Factory and OpenRLHF, which of their releases (every minor release since early
    2025, read from the released source by tools/schemagen/key_history.py) had which config
    key. Each key is judged at the version in use: `--framework-version NAME=VER`, else the
    version the repository pins (a range stands for its newest release), else the release
    the format's schema was generated from.

    - error: the key is not in that release: "valid in trl 0.19.1, removed in trl 0.20.0" or
      "added in transformers 4.56.2; the transformers in use (4.52.3) is older";
    - warning: the key is valid in the pinned release but a later release drops it (an
      upgrade will break the file).

    A key valid in the release in use is never an error because today's schema lacks it.
    Keys that schemas/versions.json tracks (renames, with their successor) are left to
    framework-version, which names the replacement; keys the format schema marks as removed
    (with a pointer to the successor) are left to the schema when the release in use lacks
    them; keys a custom script declares (--config-extras) are the script's.
    """
    for cfg in setup.configs:
        fv = config_versions(cfg, setup.options)
        renamed = {key for h in versions.for_format(cfg.kind) for key in h.tracked()}
        # Keys the consuming script defines itself (--config-extras, or its entry point) are its own.
        declared = set((setup.options.config_extras or {}).get(cfg.kind, {})) | set(getattr(cfg, "extras", None) or {})
        for s in versions.skew(cfg.data, cfg.kind, fv):
            if not (len(s.path) == 1 and s.path[0] in renamed | declared):
                yield cfg, s.path, s.message, s.severity
