"""Copy the lint corpus out of local git snapshots of public repositories and write SOURCES.yaml.

Usage: python bench/corpus_gather.py MIRRORS_DIR
MIRRORS_DIR holds one bare git directory per repository at MIRRORS_DIR/<owner>+<name>/repo.
Files keep their path inside the repository under tests/corpus/<owner>__<name>/ so that
references written relative to a repository root still resolve.
"""

import fnmatch
import hashlib
import subprocess
import sys
from pathlib import Path

import yaml

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpus"

# (repo, licence, path globs). Configs a person would lint; data files, web assets and
# CI files are left out.
SELECTION = [
    ("hiyouga/LLaMA-Factory", "Apache-2.0", [
        "examples/deepspeed/*", "examples/accelerate/*", "examples/train_lora/*", "examples/train_full/*",
        "examples/train_qlora/*", "examples/extras/*/*.yaml", "examples/extras/*/*.sh", "examples/inference/*",
        "examples/merge_lora/*"]),
    ("huggingface/trl", "Apache-2.0", ["examples/accelerate_configs/*", "trl/accelerate_configs/*", "examples/cli_configs/*"]),
    ("huggingface/alignment-handbook", "Apache-2.0", ["recipes/*.yaml", "recipes/*/*.yaml", "recipes/*/*/*.yaml", "recipes/*/*.sh"]),
    ("huggingface/open-r1", "Apache-2.0", ["recipes/*/*.yaml", "recipes/*/*/*.yaml", "scripts/*/*.sh"]),
    ("OpenRLHF/OpenRLHF", "Apache-2.0", ["examples/scripts/train_*.sh"]),
    ("axolotl-ai-cloud/axolotl", "Apache-2.0", [
        "deepspeed_configs/*.json", "examples/llama-3/*.y*ml", "examples/qwen3/*.y*ml", "examples/mistral/*.y*ml",
        "examples/mistral/*/*.y*ml", "examples/qwen2/*.y*ml"]),
    ("QwenLM/Qwen", "Apache-2.0", ["finetune/*"]),
    ("OpenBMB/MiniCPM-V", "Apache-2.0", ["finetune/*.json", "finetune/*.sh"]),
    ("hiyouga/EasyR1", "Apache-2.0", ["examples/*.sh", "examples/*.yaml"]),
    ("deepspeedai/DeepSpeedExamples", "Apache-2.0", [
        "training/autotuning/hf/dsconfigs/*.json", "training/bing_bert/deepspeed_*.json",
        "training/BingBertSquad/deepspeed_*.json", "training/imagenet/config/*.json",
        "training/pipeline_parallelism/ds_config.json", "training/gan/gan_deepspeed_config.json",
        "training/tensor_parallel/hf_integration/configs/*.json", "training/bf16_master_weight/configs/*.json",
        "compression/gpt2/config/*.json", "compression/cifar/config/*.json",
        "applications/DeepSpeed-Chat/training/step1_supervised_finetuning/training_scripts/llama2/*.sh"]),
]

# Files that say which framework versions a repository pins (data, not configs to lint: listed with
# role "pins"). setup.py is code, but lint parses it with ast and never runs it (pins.py), so it
# is data here too.
PIN_FILES = ("requirements*.txt", "pyproject.toml", "setup.py", "setup.cfg", "environment.yml")

HELD_OUT_RULE = "held out: int(sha256(b'owner/name').hexdigest()[:8], 16) % 3 == 2"


def held_out(repo):
    return int(hashlib.sha256(repo.encode()).hexdigest()[:8], 16) % 3 == 2


def git(repo_dir, *args):
    return subprocess.run(["git", "-C", str(repo_dir), *args], check=True, capture_output=True).stdout


def main(mirrors):
    entries = []
    for repo, licence, globs in SELECTION:
        repo_dir = Path(mirrors) / repo.replace("/", "+") / "repo"
        commit = git(repo_dir, "rev-parse", "HEAD").decode().strip()
        names = git(repo_dir, "ls-tree", "-r", "--name-only", "HEAD").decode().splitlines()
        # fnmatch's * crosses "/", so compare folder depth as well.
        chosen = [n for n in names if n.endswith((".json", ".yaml", ".yml", ".sh"))
                  and any(fnmatch.fnmatch(n, g) and n.count("/") == g.count("/") for g in globs)]
        pins = [n for n in names if "/" not in n and any(fnmatch.fnmatch(n, g) for g in PIN_FILES)]
        for name in chosen + pins:
            dest = CORPUS / repo.replace("/", "__") / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(git(repo_dir, "show", f"HEAD:{name}"))
            entry = {"repo": repo, "path": name, "commit": commit, "licence": licence,
                     "split": "held-out" if held_out(repo) else "tuning"}
            if name in pins:
                entry["role"] = "pins"
            entries.append(entry)
    header = (f"# Public config files used as lint test data, with their origin.\n"
              f"# Split fixed before any tuning: {HELD_OUT_RULE}\n"
              f"# (repository-level, so a held-out repository's layout was never seen while fixing rules).\n")
    (CORPUS / "SOURCES.yaml").write_text(header + yaml.safe_dump({"files": entries}, sort_keys=False, width=200))
    print(f"{sum('role' not in e for e in entries)} config files, {sum('role' in e for e in entries)} pin files")


if __name__ == "__main__":
    main(sys.argv[1])
