"""Per-stack test environments (one pinned venv per framework stack). Stdlib only.

The truth checks and smoke tests run the real frameworks in these venvs::

    from ftrecipes import devenv
    py = devenv.ensure_env("trl")            # Path to the venv's python; builds it once
    subprocess.run([py, "script.py"], env=devenv.run_env("trl"), check=True)

CLI (from the repo root)::

    PYTHONPATH=tools python -m ftrecipes.devenv ensure trl llamafactory openrlhf
    PYTHONPATH=tools python -m ftrecipes.devenv path trl       # python path, no install
    PYTHONPATH=tools python -m ftrecipes.devenv env trl        # export lines for a shell
    PYTHONPATH=tools python -m ftrecipes.devenv run trl -- torchrun --nproc_per_node 2 x.py
    PYTHONPATH=tools python -m ftrecipes.devenv info trl       # timings and size of the build
    PYTHONPATH=tools python -m ftrecipes.devenv prune          # delete envs with a stale hash

Where: ``$FTRECIPES_ENVS`` (default ``~/.cache/ftrecipes/envs``)/``<stack>-<hash>``, the hash
covering tests/envs/<stack>/requirements.txt, this module's stack-specific steps and the Python
version, so a changed pin or step gives a fresh venv. A marker file written last makes an
interrupted install start again from scratch; a complete env returns at once.

How each venv is built (all of it here, so CI on a fresh machine gets the same result):

1. ``pip install torch==2.13.0`` first (a CPU wheel lies on disk), then
   ``pip install --no-deps -r requirements.txt -c <torch==2.13.0>``. The requirements are a full
   freeze, so no resolver runs and nothing pulls a several-GB CUDA torch.
2. Stack-specific steps (see ``_POST``):
   - llamafactory: torchvision is left out (PyPI's build is CUDA-only; transformers imports it
     when present and it fails); LLaMA-Factory imports torchaudio unconditionally
     (``llamafactory.data.mm_plugin``), whose compiled libraries link CUDA libraries. torchaudio's
     loader treats *absent* libraries as "extension not built" and imports as pure Python, so
     the step deletes ``torchaudio/lib/*.so``. Audio decoding is therefore not covered.
   - openrlhf: flash-attn 2.8.3 Python part only (FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE,
     --no-build-isolation). ``run_env`` puts tests/shims/openrlhf first on PYTHONPATH: a
     stand-in ``flash_attn_2_cuda`` and a sitecustomize that, only with FTRECIPES_CPU_SHIM=1,
     redirects OpenRLHF's CUDA-only calls to CPU (see the files for what is not covered).
3. DeepSpeed is installed from a wheel built with its CPUAdam and ShareMemComm ops compiled in
   (DS_BUILD_CPU_ADAM / DS_BUILD_SHM_COMM, DS_ACCELERATOR=cpu), built once per DeepSpeed release
   under ``<envs>/wheels`` and shared by every stack that pins that release: the stacks share
   torch, Python and the machine, which is all the compiled ops depend on, whereas torch's JIT
   would compile them again in each venv (its build.ninja names the venv's own paths). The last
   step loads both ops and fails if either would be JIT-built. An older DeepSpeed from
   ``ensure_release`` JIT-builds its ShareMemComm op into a TORCH_EXTENSIONS_DIR of its own, so
   that releases do not rebuild each other's op; ``run_env`` keeps the venv's bin/ first on PATH
   (system ninja 1.11 vs pip ninja 1.13 would otherwise force a rebuild).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

STACKS = ("trl", "llamafactory", "openrlhf")
TORCH_PIN = "torch==2.13.0"
REPO = Path(__file__).resolve().parents[2]
MARKER = ".ftrecipes-complete"
DS_OPS = ("CPUAdamBuilder", "ShareMemCommBuilder")

# Stack-specific steps, described in words; part of the env hash (bump when a step changes).
_STEPS = {
    "trl": "v1",
    "llamafactory": "v1: no torchvision; delete torchaudio/lib/*.so",
    "openrlhf": "v1: flash-attn==2.8.3 python-only (skip cuda build, no build isolation); "
                "shims tests/shims/openrlhf",
}
# Steps every stack shares (part of each env hash as well)
_COMMON_STEPS = "v2: deepspeed from a wheel with its CPU ops compiled in, shared per release"
# Import checks run at the end of an install (cheap proof that the env is usable).
_CHECKS = {
    "trl": "import deepspeed, transformers, trl, peft, accelerate, torch; "
           "assert torch.__version__.startswith('2.13.0')",
    "llamafactory": "import torch, llamafactory.data.mm_plugin, deepspeed; "
                    "from llamafactory.hparams import get_train_args; "
                    "from llamafactory.train.tuner import run_exp; "
                    "assert torch.__version__.startswith('2.13.0')",
    "openrlhf": "import torch, deepspeed, openrlhf.cli.train_sft, openrlhf.cli.train_dpo, "
                "openrlhf.utils.deepspeed.deepspeed, openrlhf.trainer; "
                "assert torch.__version__.startswith('2.13.0')",
}
_SHIM_PATHS = {"openrlhf": [REPO / "tests" / "shims" / "openrlhf"]}


def _check_stack(stack: str) -> None:
    if stack not in STACKS:
        raise ValueError(f"unknown stack {stack!r}; expected one of {', '.join(STACKS)}")


def envs_root() -> Path:
    return Path(os.environ.get("FTRECIPES_ENVS") or Path.home() / ".cache" / "ftrecipes" / "envs")


def requirements_path(stack: str) -> Path:
    _check_stack(stack)
    return REPO / "tests" / "envs" / stack / "requirements.txt"


def env_hash(stack: str) -> str:
    h = hashlib.sha256()
    h.update(requirements_path(stack).read_bytes())
    h.update(b"\0" + _STEPS[stack].encode() + b"\0" + _COMMON_STEPS.encode() + b"\0" + TORCH_PIN.encode())
    h.update(b"\0%d.%d.%d" % sys.version_info[:3])
    return h.hexdigest()[:12]


def env_dir(stack: str) -> Path:
    return envs_root() / f"{stack}-{env_hash(stack)}"


def env_python(stack: str) -> Path:
    return env_dir(stack) / "bin" / "python"


def is_complete(stack: str) -> bool:
    d = env_dir(stack)
    return (d / MARKER).is_file() and (d / "bin" / "python").exists()


def _threads() -> str:
    # Tests run 2 training processes on a 2-core machine: one thread each.
    return str(max(1, (os.cpu_count() or 2) // 2))


def run_env(stack: str, *, base: dict | None = None, cpu_shim: bool = True, release: Path | None = None) -> dict:
    """Environment variables to run things in the stack's venv (does not build it); with
    release (a directory from ensure_release), that older release shadows the stack's copy."""
    _check_stack(stack)
    d = env_dir(stack)
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONHOME", None)
    env["VIRTUAL_ENV"] = str(d)
    env["PATH"] = os.pathsep.join([str(d / "bin"), env.get("PATH", os.defpath)])
    env["TORCH_EXTENSIONS_DIR"] = str(d / "torch_extensions")
    env["DS_ACCELERATOR"] = "cpu"
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(k, _threads())
    env.update({
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1", "WANDB_DISABLED": "true", "WANDB_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false", "GRADIO_ANALYTICS_ENABLED": "False",
        "DISABLE_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONUNBUFFERED": "1",
    })
    shims = [str(p) for p in _SHIM_PATHS.get(stack, [])]
    if shims:
        rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(shims + rest)
        if cpu_shim:
            env["FTRECIPES_CPU_SHIM"] = "1"
        else:
            env.pop("FTRECIPES_CPU_SHIM", None)
    if release is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(release)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        # torch names a JIT build's folder after the op alone: two DeepSpeed releases sharing one
        # would rebuild it each time the other ran
        env["TORCH_EXTENSIONS_DIR"] = str(Path(release) / "torch_extensions")
    return env


# ------------------------------------------------------------------------------------------------
# install
# ------------------------------------------------------------------------------------------------
def _site_packages(d: Path) -> Path:
    return d / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def _du(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


class _Installer:
    def __init__(self, stack: str, d: Path, log):
        self.stack, self.d, self.log = stack, d, log
        self.logfile = d.parent / f"{d.name}.install.log"
        self.timings: dict[str, float] = {}

    def say(self, msg: str) -> None:
        print(f"[devenv {self.stack}] {msg}", file=self.log, flush=True)

    def run(self, name: str, cmd: list, env: dict | None = None) -> None:
        t0 = time.time()
        self.say(f"{name} ...")
        base = dict(os.environ)
        base.pop("PYTHONPATH", None)
        base["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        base["PYTHONNOUSERSITE"] = "1"
        with open(self.logfile, "a") as lf:
            lf.write(f"\n### {name}: {' '.join(map(str, cmd))}\n")
            lf.flush()
            r = subprocess.run([str(c) for c in cmd], stdout=lf, stderr=subprocess.STDOUT,
                               env=env if env is not None else base, cwd=str(self.d))
        dt = time.time() - t0
        self.timings[name] = round(dt, 1)
        if r.returncode != 0:
            tail = self.logfile.read_text(errors="replace").splitlines()[-30:]
            raise RuntimeError(f"devenv {self.stack}: step {name!r} failed (exit {r.returncode}); "
                               f"log {self.logfile}:\n" + "\n".join(tail))
        self.say(f"{name} done in {dt:.0f}s")

    def pip(self, name: str, *args, env: dict | None = None) -> None:
        self.run(name, [self.d / "bin" / "python", "-m", "pip", "install",
                        "--disable-pip-version-check", *args], env=env)


def _post_llamafactory(inst: _Installer) -> None:
    sp = _site_packages(inst.d)
    if (sp / "torchvision").exists():
        raise RuntimeError("torchvision is installed in the llamafactory env; it must not be")
    removed = sorted(p.name for p in (sp / "torchaudio" / "lib").glob("*.so"))
    for name in removed:
        (sp / "torchaudio" / "lib" / name).unlink()
    inst.say(f"torchaudio: removed CUDA-linked libraries {removed} (imports as pure Python)")


def _post_openrlhf(inst: _Installer) -> None:
    pins = [ln.strip() for ln in requirements_path("openrlhf").read_text().splitlines()
            if ln.strip().lower().replace("_", "-").startswith("flash-attn==")]
    env = dict(os.environ, FLASH_ATTENTION_SKIP_CUDA_BUILD="TRUE",
               FLASH_ATTENTION_FORCE_BUILD="TRUE", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    inst.pip("flash-attn (python part only)", "--no-build-isolation", "--no-deps",
             "-c", inst.d / "ftrecipes-constraints.txt", *pins, env=env)


_POST = {"llamafactory": _post_llamafactory, "openrlhf": _post_openrlhf}
# Lines of requirements.txt installed by a step of their own instead of the main pip run.
_DEFERRED = {"openrlhf": ("flash-attn==",)}
_DS_PIN = "deepspeed=="
# DeepSpeed's setup.py compiles the ops these variables name into the wheel (op_builder BUILD_VAR)
_DS_BUILD_ENV = {"DS_BUILD_OPS": "0", "DS_BUILD_CPU_ADAM": "1", "DS_BUILD_SHM_COMM": "1", "DS_ACCELERATOR": "cpu"}


def _deepspeed_pin(stack: str) -> str:
    [pin] = [ln.strip() for ln in requirements_path(stack).read_text().splitlines()
             if ln.strip().lower().startswith(_DS_PIN)]
    return pin


def _deepspeed_wheel(inst: _Installer, pin: str) -> Path:
    """The wheel of `pin` with the CPU ops compiled in, built by the first stack that needs it
    (the others wait on the lock). Keyed by everything the compiled ops depend on here."""
    import fcntl

    key = f"{pin.split('==')[1]}-{TORCH_PIN.split('==')[1]}-py{sys.version_info[0]}{sys.version_info[1]}-cpu-ops"
    folder = envs_root() / "wheels" / f"deepspeed-{key}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"deepspeed-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not list(folder.glob("deepspeed-*.whl")):
            tmp = folder.parent / f".deepspeed-{key}.{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            env.update(_DS_BUILD_ENV, PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1",
                       MAX_JOBS=str(os.cpu_count() or 2))
            # no build isolation: setup.py compiles against this venv's torch (the pinned one)
            inst.run("deepspeed wheel with CPU ops", [inst.d / "bin" / "python", "-m", "pip", "wheel", "--no-deps",
                                                      "--no-build-isolation", "--no-cache-dir", "-w", tmp, pin], env=env)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)  # whole or absent: a killed build leaves only its temp folder
        [wheel] = folder.glob("deepspeed-*.whl")
    return wheel

_LOAD_OPS = """
import time
from deepspeed.accelerator import get_accelerator
from deepspeed.git_version_info import installed_ops
acc = get_accelerator()
assert acc.device_name() == "cpu", acc.device_name()
for name in %r:
    builder = acc.create_op_builder(name)
    assert installed_ops.get(builder.NAME), f"{builder.NAME} is not compiled into the wheel: {installed_ops}"
    t0 = time.time()
    builder.load()
    print(f"loaded {name} in {time.time() - t0:.1f}s", flush=True)
""" % (DS_OPS,)


def _install(stack: str, d: Path, log) -> None:
    t_all = time.time()
    if d.exists():
        shutil.rmtree(d)
    d.parent.mkdir(parents=True, exist_ok=True)
    inst = _Installer(stack, d, log)
    if inst.logfile.exists():
        inst.logfile.unlink()
    inst.say(f"building {d} (log {inst.logfile})")
    d.mkdir()
    inst.run("venv", [sys.executable, "-m", "venv", d])
    (d / "ftrecipes-constraints.txt").write_text(TORCH_PIN + "\n")
    inst.pip("torch", TORCH_PIN)
    deferred = (*_DEFERRED.get(stack, ()), _DS_PIN)
    lines = [ln for ln in requirements_path(stack).read_text().splitlines()
             if not ln.strip().lower().replace("_", "-").startswith(deferred)]
    (d / "ftrecipes-requirements.txt").write_text("\n".join(lines) + "\n")
    inst.pip("requirements", "--no-deps", "-r", d / "ftrecipes-requirements.txt",
             "-c", d / "ftrecipes-constraints.txt")
    inst.pip("deepspeed", "--no-deps", _deepspeed_wheel(inst, _deepspeed_pin(stack)))
    if stack in _POST:
        _POST[stack](inst)
    t_install = time.time() - t_all
    base = dict(os.environ)
    base.pop("PYTHONPATH", None)
    renv = run_env(stack, base=base, cpu_shim=True)
    inst.run("import check", [d / "bin" / "python", "-c", _CHECKS[stack]], env=renv)
    inst.run("load deepspeed ops", [d / "bin" / "python", "-c", _LOAD_OPS], env=renv)
    info = {
        "stack": stack, "hash": env_hash(stack), "python": sys.version.split()[0],
        "install_s": round(t_install, 1), "op_build_s": inst.timings.get("deepspeed wheel with CPU ops", 0.0),
        "total_s": round(time.time() - t_all, 1), "steps_s": inst.timings,
        "size_mb": round(_du(d) / 2**20), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                  time.gmtime()),
    }
    (d / MARKER).write_text(json.dumps(info, indent=2) + "\n")  # last: marks the env complete
    inst.say(f"complete: install {info['install_s']}s (deepspeed ops built here: {info['op_build_s']}s), "
             f"{info['size_mb']} MB")


def ensure_env(stack: str, log=sys.stderr) -> Path:
    """Build the stack's venv if it is not complete; return its python. Safe to call from
    several processes at once (a file lock serialises builds)."""
    _check_stack(stack)
    if is_complete(stack):
        return env_python(stack)
    d = env_dir(stack)
    d.parent.mkdir(parents=True, exist_ok=True)
    import fcntl

    with open(d.parent / f"{d.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not is_complete(stack):
            _install(stack, d, log)
    return env_python(stack)


# Older releases of a stack's framework, for truth checks of files rendered for that release
# (e.g. OpenRLHF 0.8.5 flag names): the release alone, `pip install --no-deps --target`, into
# <env>/releases/<name>-<version>. run_env(stack, release=...) puts it first on PYTHONPATH, where it
# shadows the stack's own copy and runs on the stack's other packages (torch 2.13, DeepSpeed,
# transformers), not on the pins it was released with: enough for building its argument parser
# and DeepSpeed config, not a claim that it trains on this stack. A release whose import needs
# older companions than the stack has (transformers 4.x checks tokenizers and huggingface-hub
# versions at import) lists them all in tests/envs/<stack>/releases/<package>-<version>.txt,
# installed the same way instead of the bare pin. A stack may have releases of several packages
# (the first is the default); each release gets its own folder, <package>-<version>.
# The trl stack also holds vLLM releases: parser only, for tests/frameworks/truth_vllm.py, which
# checks `vllm serve` command lines with vLLM's own parser. The llamafactory stack holds older
# DeepSpeed releases (pure Python without its ops, which ZeRO-3 with the trainer's own optimizer
# does not load) for tests/frameworks/zero3_recompute_pins.py.
RELEASES = {"openrlhf": ("openrlhf",), "trl": ("transformers", "vllm"), "llamafactory": ("deepspeed",)}


def _release_package(stack: str, package: str | None) -> str:
    _check_stack(stack)
    if stack not in RELEASES:
        raise ValueError(f"stack {stack!r} has no older releases to install")
    if package is not None and package not in RELEASES[stack]:
        raise ValueError(f"stack {stack!r} has no releases of {package!r}")
    return package or RELEASES[stack][0]


def release_dir(stack: str, version: str, package: str | None = None) -> Path:
    package = _release_package(stack, package)
    if not all(part.isalnum() for part in version.split(".")):
        raise ValueError(f"bad version {version!r}")
    return env_dir(stack) / "releases" / f"{package}-{version}"


def release_pins(stack: str, version: str, package: str | None = None) -> list:
    """What ensure_release installs: the release's freeze file when it has one, else the bare pin."""
    package = _release_package(stack, package)
    freeze = REPO / "tests" / "envs" / stack / "releases" / f"{package}-{version}.txt"
    if freeze.is_file():
        return [ln.strip() for ln in freeze.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return [f"{package}=={version}"]


def ensure_release(stack: str, version: str, log=sys.stderr, package: str | None = None) -> Path:
    """Install (once) package==version (default: the stack's first in RELEASES) beside the
    stack's venv; return its directory."""
    package = _release_package(stack, package)
    d = release_dir(stack, version, package)
    pins = release_pins(stack, version, package)
    marker = json.dumps({"release": f"{package}=={version}", "pins": pins}) + "\n"

    def done():
        # A changed freeze file reinstalls the release.
        return (d / MARKER).is_file() and (d / MARKER).read_text() == marker

    if done():
        return d
    python = ensure_env(stack, log)
    import fcntl

    d.parent.mkdir(parents=True, exist_ok=True)
    with open(d.parent / f"{d.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done():
            if d.exists():
                shutil.rmtree(d)
            base = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1")
            base.pop("PYTHONPATH", None)
            print(f"[devenv {stack}] installing {' '.join(pins)} into {d}", file=log, flush=True)
            r = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-compile", "--target", str(d),
                                *pins], env=base, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"devenv {stack}: installing {package}=={version} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
            (d / MARKER).write_text(marker)
    return d


def prune(log=sys.stderr) -> list:
    """Delete envs of known stacks whose hash is no longer current and that no process is
    building (their lock can be taken). Returns the removed directories."""
    import fcntl

    root, removed = envs_root(), []
    if not root.is_dir():
        return removed
    current = {env_dir(s).name for s in STACKS}
    for d in sorted(root.iterdir()):
        if not d.is_dir() or d.name in current or d.name.rsplit("-", 1)[0] not in STACKS:
            continue
        with open(root / f"{d.name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            shutil.rmtree(d, ignore_errors=True)
            for extra in (root / f"{d.name}.install.log",):
                extra.unlink(missing_ok=True)
        (root / f"{d.name}.lock").unlink(missing_ok=True)
        removed.append(d)
        print(f"[devenv] removed stale {d}", file=log)
    return removed


def env_info(stack: str) -> dict | None:
    """The completion marker's content (timings, size) or None."""
    m = env_dir(stack) / MARKER
    return json.loads(m.read_text()) if m.is_file() else None


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ftrecipes.devenv", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ensure", help="build (if needed) and print each stack's python")
    p.add_argument("stacks", nargs="+", choices=STACKS)
    p = sub.add_parser("path", help="print the stack's python path (no install)")
    p.add_argument("stack", choices=STACKS)
    p = sub.add_parser("info", help="print the completion marker (timings, size)")
    p.add_argument("stack", choices=STACKS)
    p = sub.add_parser("env", help="print `export` lines of run_env(stack)")
    p.add_argument("stack", choices=STACKS)
    sub.add_parser("prune", help="delete stale envs (hash no longer current)")
    p = sub.add_parser("run", help="ensure the env, then run a command in it")
    p.add_argument("stack", choices=STACKS)
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if a.cmd == "ensure":
        for s in a.stacks:
            print(ensure_env(s), flush=True)
    elif a.cmd == "path":
        print(env_python(a.stack))
        return 0 if is_complete(a.stack) else 1
    elif a.cmd == "info":
        info = env_info(a.stack)
        print(json.dumps(info, indent=2) if info else "not built")
        return 0 if info else 1
    elif a.cmd == "env":
        import shlex

        env = run_env(a.stack)
        for k, v in sorted(env.items()):
            if os.environ.get(k) != v:
                print(f"export {k}={shlex.quote(v)}")
    elif a.cmd == "prune":
        prune()
    elif a.cmd == "run":
        cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
        if not cmd:
            ap.error("run: no command given")
        ensure_env(a.stack)
        return subprocess.run(cmd, env=run_env(a.stack)).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
