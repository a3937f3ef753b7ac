"""Which framework parser checks which rendered file (pytest side; no framework imports).

A job is a dict for tests/frameworks/truth.py. Builders are registered per
recipe file format; launch scripts yield one job per framework command in them.
"""


from ftrecipes import derive, recipe as recipe_mod, render, shellcmd, values

BUILDERS = {}
# Launch-script commands: a predicate on the command words and a job builder.
COMMANDS = []


def builder(fmt):
    def register(fn):
        BUILDERS[fmt] = fn
        return fn

    return register


def command(predicate):
    def register(fn):
        COMMANDS.append((predicate, fn))
        return fn

    return register


@builder("deepspeed")
def _ds(ctx, path, text):
    return [{"check": "deepspeed", "path": str(path), "world_size": ctx["world_size"]}]


@builder("accelerate")
def _acc(ctx, path, text):
    return [{"check": "accelerate", "path": str(path)}]


@builder("trl")
def _trl(ctx, path, text):
    script = ctx["_recipe"].meta["framework"]["script"].rsplit(".", 1)[-1]
    # use_cpu: TrainingArguments refuses bf16 on a machine without a GPU; it is the one
    # CPU necessity added, and changes nothing else the parser checks.
    return [{"check": "trl", "path": str(path), "script": script, "args": ["--use_cpu", "true"],
             "report": ["per_device_train_batch_size", "gradient_accumulation_steps", "num_generations", "bf16", "fp16",
                        "activation_checkpointing", "use_peft", "lora_r", "max_grad_norm"]}]


def _launch(ctx, path, text):
    jobs = []
    for cmd in shellcmd.commands(text):
        for predicate, fn in COMMANDS:
            if predicate(cmd.words):
                jobs.extend(fn(ctx, path, cmd))
    return jobs


BUILDERS["shell"] = _launch
BUILDERS["openrlhf"] = _launch


@command(lambda w: w[:2] == ["trl", "vllm-serve"])
def _vllm(ctx, path, cmd):
    return [{"check": "vllm-serve", "args": cmd.words[2:]}]


def run_truth(stack, jobs, work, timeout=900):
    """Run jobs through tests/frameworks/truth.py in the stack's venv; one result per job."""
    import json
    import pathlib
    import subprocess

    from ftrecipes import devenv

    work = pathlib.Path(work)
    script = pathlib.Path(__file__).resolve().parent / "frameworks" / "truth.py"
    (work / "jobs.json").write_text(json.dumps(jobs))
    proc = subprocess.run(
        [str(devenv.ensure_env(stack)), str(script), str(work / "jobs.json"), str(work / "results.json")],
        env=devenv.run_env(stack), capture_output=True, text=True, timeout=timeout, cwd=work,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((work / "results.json").read_text())


def _load_plugins():
    """Recipe-specific job builders live in truth_jobs_<stack>.py beside this file."""
    import importlib
    import pathlib

    for path in sorted(pathlib.Path(__file__).resolve().parent.glob("truth_jobs_*.py")):
        importlib.import_module(path.stem)


def jobs_for(name, overrides, out_dir):
    """Render recipe NAME with overrides into out_dir; return (stack, [(file name, job)])."""
    r = recipe_mod.load(name)
    typed = values.parse_sets(r, overrides)
    ctx = derive.derive(r, values.resolve(r, typed))
    ctx["_recipe"] = r
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = []
    for rfile, text in render.render(r, typed):
        path = out_dir / rfile.name
        path.write_text(text)
        for job in BUILDERS.get(rfile.format, lambda *a: [])(ctx, path, text):
            job.setdefault("cwd", str(out_dir))
            jobs.append((rfile.name, job))
    return r.meta["framework"]["stack"], jobs


_load_plugins()
