"""Run in the trl stack venv: which tensors TRL's fused LM head (trl.trainer.utils.add_fused_lm_head)
allocates for one forward + backward of a tiny Llama, against the model's own full-logits loss.

Prints JSON: for each path the largest tensor any op returned (elements, shape) and whether an
fp32 tensor of the LM head's shape was made (the fp32 weight-gradient accumulator). Runs on CPU,
where the kernel folds its tiles in torch instead of Triton: the tile shapes are the same."""
import json
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM
from trl.trainer.utils import add_fused_lm_head

V, H, T = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


class Record(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.largest = (0, [])
        self.fp32_head_shaped = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                if t.numel() > self.largest[0]:
                    self.largest = (t.numel(), list(t.shape))
                if list(t.shape) == [V, H] and t.dtype == torch.float32 and func.__name__.startswith("zeros"):
                    self.fp32_head_shaped = True
        return out


def run(fused):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=2 * H, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    if fused:
        add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    ids = torch.randint(0, V, (1, T))
    rec = Record()
    with rec:
        out = model(input_ids=ids, labels=ids, fused_lm_head=True) if fused else model(input_ids=ids, labels=ids)
        out.loss.backward()
    return {"largest": rec.largest, "fp32_head_zeros": rec.fp32_head_shaped}


print(json.dumps({"fused": run(True), "full": run(False)}))
