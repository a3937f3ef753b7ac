"""Turn MosaicML llm-foundry's MPT throughput tables into bench/throughput/cases.yaml entries.

Source: github.com/mosaicml/llm-foundry, scripts/train/benchmarking/README.md at commit
8c8dd48f72168c5d51e2f7b151595892a8fba43d (tables "H100 80GB BF16", "A100 80GB ..." and
"A100 40GB ..."; the FP8 table and the >= 128-GPU H100 table are left out: fp8 is not a
precision the planner proposes, and 128+ GPUs are beyond what it plans for).
Shapes: scripts/train/yamls/pretrain/mpt-*.yaml at the same commit (d_model, n_layers, n_heads,
expansion_ratio 4, vocab 50368, tied embeddings, no GQA).
Usage: git show COMMIT:scripts/train/benchmarking/README.md | python from_llm_foundry.py > part.yaml
"""
import sys

COMMIT = "8c8dd48f72168c5d51e2f7b151595892a8fba43d"
SHAPES = {"760m": (1536, 24, 12), "1b": (2048, 24, 16), "3b": (2560, 32, 20), "7b": (4096, 32, 32),
          "13b": (5120, 40, 40), "30b": (7168, 48, 56), "70b": (8192, 80, 64)}
TABLES = {"## H100 80GB BF16": "H100-80GB", "## A100 80GB with": "A100-80GB", "## A100 40GB with": "A100-40GB"}


def main(text: str) -> None:
    gpu, cols, section = None, None, ""
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            gpu = next((g for k, g in TABLES.items() if line.startswith(k) and "Large Scale" not in line), None)
            cols = None
            continue
        if not gpu or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "Model":
            cols = cells
            continue
        if cols is None or cells[0].startswith("---"):
            continue
        row = dict(zip(cols, cells))
        if "bf16" not in row["Precision"] or row["Model"] not in SHAPES:
            continue
        h, layers, heads = SHAPES[row["Model"]]
        gpus = int(row["# GPUs"])
        ckpt = row["Activation Checkpointing"] == "True"
        cid = f"mpt-{row['Model']}-{gpu}-x{gpus}-s{row['SeqLen (T)']}-mb{row['MicroBatchSize']}-ga{row['GradAccum']}" + ("-ckpt" if ckpt else "")
        print(f"- id: {cid}")
        print(f"  source: {{repo: mosaicml/llm-foundry, path: scripts/train/benchmarking/README.md, commit: {COMMIT}, table: {section!r}}}")
        print(f"  model: {{d_model: {h}, n_layers: {layers}, n_heads: {heads}, vocab: 50368, mlp: gelu_4x, params: {row['NumParams']}}}")
        print(f"  gpu: {gpu}\n  gpus: {gpus}\n  nodes: {max(1, gpus // 8)}\n  method: sft\n  framework: fsdp")
        print(f"  seq_len: {row['SeqLen (T)']}\n  micro_batch: {row['MicroBatchSize']}\n  grad_accum: {row['GradAccum']}")
        print(f"  gradient_checkpointing: {str(ckpt).lower()}")
        print(f"  measured: {{tokens_per_s_per_gpu: {row['Throughput (T/s/GPU)']}, mfu: {float(row['MFU']) / 100:.4f}}}")


if __name__ == "__main__":
    main(sys.stdin.read())
