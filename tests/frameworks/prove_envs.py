"""Prove the stack venvs work: build each (ftrecipes.devenv.ensure_env), then run
  1. tests/frameworks/ds_zero2_tiny.py with torchrun, 2 processes, ZeRO-2 + CPU optimizer offload;
  2. a framework check: trl SFTTrainer 2-process (ZeRO-2); `llamafactory-cli version` +
     `get_train_args` + `llamafactory-cli train` 2-process (LoRA SFT, ZeRO-2 offload);
     `openrlhf.cli.train_sft` 2-process (ZeRO-2, adam offload, sdpa).
Prints timings. Heavy (minutes): not part of the unit test run.

    PYTHONPATH=tools python tests/frameworks/prove_envs.py [trl llamafactory openrlhf] [--skip-framework]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tools"))
from ftrecipes import devenv  # noqa: E402


def _run(cmd, env, cwd=None, tag=""):
    t0 = time.time()
    r = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True)
    dt = time.time() - t0
    out = r.stdout + r.stderr
    if r.returncode != 0:
        print(out[-6000:])
        raise SystemExit(f"{tag}: exit {r.returncode} after {dt:.0f}s")
    return out, dt


def _losses(out):
    return [ln.strip() for ln in out.splitlines()
            if ln.startswith("step ") or "'loss'" in ln or "OK finite" in ln
            or "world=" in ln or "loss_mean" in ln or "gpt_loss" in ln][-8:]


TRL_SFT = textwrap.dedent("""
    import math, sys
    sys.path.insert(0, %(here)r)
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer
    m = %(model)r
    ds = load_dataset("json", data_files=%(data)r, split="train")
    cfg = SFTConfig(output_dir=%(out)r, use_cpu=True, bf16=True, max_steps=3,
                    per_device_train_batch_size=2, gradient_accumulation_steps=1,
                    logging_steps=1, save_strategy="no", report_to=[], max_length=128,
                    deepspeed={"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                               "bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto",
                               "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
                               "gradient_clipping": "auto"})
    tr = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(m), args=cfg, train_dataset=ds,
                    processing_class=AutoTokenizer.from_pretrained(m))
    res = tr.train()
    assert math.isfinite(res.training_loss), res
    if tr.args.process_index == 0:
        print("trl SFT OK loss", res.training_loss, "world", tr.args.world_size)
""")


def framework_check(stack, py, env, work: Path):
    bindir = Path(py).parent
    assets = work / "assets"
    _run([py, HERE / "tiny.py", assets], env, tag="tiny assets")
    model = assets / "model"
    if stack == "trl":
        script = work / "trl_sft.py"
        script.write_text(TRL_SFT % dict(here=str(HERE), model=str(model),
                                         data=str(assets / "sft.jsonl"), out=str(work / "out")))
        out, dt = _run([bindir / "torchrun", "--nproc_per_node", "2", "--master_port", "29531",
                        script], env, tag="trl sft")
        return {"trl_sft_2proc_s": round(dt, 1), "lines": [l for l in out.splitlines()
                                                           if "loss" in l][-4:]}
    if stack == "llamafactory":
        res = {}
        out, dt = _run([bindir / "llamafactory-cli", "version"], env, tag="llamafactory-cli version")
        res["cli_version"] = [l.strip(" |") for l in out.splitlines() if "LLaMA Factory" in l][:1]
        ds_cfg = work / "ds_z2.json"
        ds_cfg.write_text(json.dumps({
            "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
            "bf16": {"enabled": "auto"},
            "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}))
        args = dict(model_name_or_path=str(model), stage="sft", do_train=True,
                    finetuning_type="lora", lora_target="all", dataset="tiny_sft",
                    dataset_dir=str(assets / "data"), template="qwen", cutoff_len=128,
                    max_samples=16, overwrite_cache=True, preprocessing_num_workers=1,
                    output_dir=str(work / "lf_out"), logging_steps=1, save_strategy="no",
                    per_device_train_batch_size=2, gradient_accumulation_steps=1,
                    learning_rate=1e-4, max_steps=3, bf16=True, use_cpu=True,
                    deepspeed=str(ds_cfg), report_to="none")
        # .yaml holding JSON (YAML is a superset): LLaMA-Factory 0.9.5 cannot read a .json
        # config (read_args calls json.load on a Path).
        cfg = work / "lf_sft.yaml"
        cfg.write_text(json.dumps(args))
        chk = ("import json,sys; from llamafactory.hparams import get_train_args; "
               "r = get_train_args(json.load(open(sys.argv[1]))); print('get_train_args OK', "
               "type(r[2]).__name__, r[2].deepspeed)")
        one = dict(env, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT="29532")
        out, dt = _run([py, "-c", chk, cfg], one, tag="get_train_args")
        res["get_train_args"] = [l for l in out.splitlines() if "OK" in l]
        res["get_train_args_s"] = round(dt, 1)
        tenv = dict(env, FORCE_TORCHRUN="1", NNODES="1", NPROC_PER_NODE="2", MASTER_PORT="29533")
        out, dt = _run([bindir / "llamafactory-cli", "train", cfg], tenv, tag="llamafactory train")
        res["lf_sft_2proc_s"] = round(dt, 1)
        res["lines"] = [l.strip() for l in out.splitlines() if "'loss'" in l or "train_loss" in l][-4:]
        return res
    if stack == "openrlhf":
        cmd = [bindir / "torchrun", "--nproc_per_node", "2", "--master_port", "29534",
               "-m", "openrlhf.cli.train_sft",
               "--model.model_name_or_path", model, "--data.dataset", assets / "sft.jsonl",
               "--data.input_key", "messages", "--data.apply_chat_template",
               "--data.max_len", "128", "--data.max_samples", "16",
               "--train.micro_batch_size", "2", "--train.batch_size", "4",
               "--train.max_epochs", "1", "--ds.zero_stage", "2", "--ds.adam_offload",
               "--ds.param_dtype", "bf16", "--ds.attn_implementation", "sdpa",
               "--adam.lr", "1e-4", "--ckpt.output_dir", work / "orl_out",
               "--ckpt.save_steps", "-1", "--logger.logging_steps", "1"]
        out, dt = _run(cmd, env, tag="openrlhf train_sft")
        return {"orl_sft_2proc_s": round(dt, 1),
                "lines": [l.strip()[-200:] for l in out.splitlines() if "loss" in l][-3:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stacks", nargs="*", default=list(devenv.STACKS))
    ap.add_argument("--skip-framework", action="store_true")
    a = ap.parse_args()
    report = {}
    for stack in a.stacks:
        t0 = time.time()
        py = devenv.ensure_env(stack)
        r = {"ensure_s": round(time.time() - t0, 1), "marker": devenv.env_info(stack)}
        env = devenv.run_env(stack)
        with tempfile.TemporaryDirectory(prefix=f"ftr-prove-{stack}-") as tmp:
            out, dt = _run([Path(py).parent / "torchrun", "--nproc_per_node", "2",
                            "--master_port", "29530", HERE / "ds_zero2_tiny.py",
                            "--workdir", tmp], env, tag=f"{stack} ds_zero2_tiny")
            r["ds_zero2_2proc_s"] = round(dt, 1)
            r["ds_zero2"] = _losses(out)
            if "OK finite losses" not in out:
                raise SystemExit(f"{stack}: no finite losses\n{out[-3000:]}")
            if not a.skip_framework:
                r["framework"] = framework_check(stack, py, env, Path(tmp))
        report[stack] = r
        print(json.dumps({stack: r}, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
