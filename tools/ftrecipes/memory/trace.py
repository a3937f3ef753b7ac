"""Measure one real training step of a full-size architecture without a GPU (optional extra).

Needs torch + transformers (+ peft for LoRA); they are imported inside functions so that the rest
of ftrecipes keeps its base dependencies. Method (see NOTES.md, "Measuring training memory without
a GPU"): build the model on the meta device in bf16, materialise it with fake storage under
FakeTensorMode (to_empty on "cpu": a fake "cuda" aborts on CPU builds of torch), then run forward,
backward and an AdamW step inside torch's MemTracker, which categorises every allocation.

What it measures is plain single-process PyTorch (parameters, gradients and AdamW states all in
the parameter dtype, no DeepSpeed); bench/memory_vs_trace.py compares it with estimate() in the
matching "torch" mode. Not captured: allocator rounding/fragmentation, CUDA context, NCCL buffers.
"""
from __future__ import annotations

import time

from .catalog import model as catalog_model

CATEGORIES = {"Parameter": "params", "Buffer": "buffers", "Gradient": "grads", "Activation": "activations",
              "Temp": "temporaries", "Optstate": "optimizer", "Other": "other"}


def _mem_tracker_cls():
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    class FrozenAwareMemTracker(MemTracker):
        # torch 2.13's MemTracker registers grad hooks on every parameter; hooks on frozen (LoRA base)
        # parameters raise, so track those as parameters only.
        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            def _grad_hook(grad):
                self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)

            pmem = bmem = 0
            for p in module.parameters():
                pmem += sum(w.mem_consumed for w in self._update_and_maybe_create_winfos(p, _MemRefType.PARAM))
                if p.grad is not None:
                    self._update_and_maybe_create_winfos(p.grad, _MemRefType.GRAD)
                if install_grad_hooks and p.requires_grad and self._param_to_grad_hook_handles.get(p) is None:
                    self._param_to_grad_hook_handles[p] = (
                        p.register_hook(_grad_hook),
                        p.register_post_accumulate_grad_hook(lambda q: _grad_hook(q.grad)),
                    )
            for b in module.buffers():
                bmem += sum(w.mem_consumed for w in self._update_and_maybe_create_winfos(b, _MemRefType.BUFFER))
            return pmem, bmem

    return FrozenAwareMemTracker


def _hf_config(shape, attn_implementation):
    import transformers

    cfg = dict(shape.hf_config)
    mtype = cfg.pop("model_type")
    cls = transformers.CONFIG_MAPPING[mtype]
    cfg.setdefault("max_position_embeddings", 32768)
    c = cls(**cfg)
    c._attn_implementation = attn_implementation
    c.use_cache = False
    return c


def trace_step(model: str, seq_len: int, micro_batch: int = 1, gradient_checkpointing: bool = False,
               lora_rank: int = 0, lora_target: str = "all", attn_implementation: str = "sdpa") -> dict:
    """Run one fake training step; return {phases: [{name, total_bytes, by_category}], ...}.

    Phases: setup (model + optimizer built), forward (peak while running forward and the loss),
    backward (peak during backward), step (peak during optimizer.step). Each phase's breakdown is
    the tracker snapshot at that phase's peak.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import _TOTAL_KEY
    from transformers import AutoModelForCausalLM

    shape = catalog_model(model)
    t0 = time.time()
    torch.set_default_dtype(torch.bfloat16)
    cfg = _hf_config(shape, attn_implementation)
    with torch.device("meta"):
        net = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    if lora_rank:
        from peft import LoraConfig, get_peft_model

        targets = "all-linear" if lora_target in ("all", "all-linear") else lora_target.split(",")
        net = get_peft_model(net, LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0,
                                             target_modules=targets, task_type="CAUSAL_LM"))
    if gradient_checkpointing:
        net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    net.train()
    trainable = [p for p in net.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in net.parameters())
    n_trainable = sum(p.numel() for p in trainable)

    phases = []
    with FakeTensorMode(allow_non_fake_inputs=True):
        net.to_empty(device="cpu")
        if shape.tie_word_embeddings:
            # to_empty gives each module its own new tensor, silently untying lm_head and the
            # embedding; re-tie as from_pretrained would
            base = net.get_base_model() if hasattr(net, "get_base_model") else net
            base.lm_head.weight = base.get_input_embeddings().weight
        # single-tensor AdamW, compared with estimate(adam_impl="single"): foreach's list-wide
        # sqrt copy is one formula in the estimate, single's per-tensor temporaries need a trace
        opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=1e-5,
                                foreach=False, fused=False)
        ids = torch.randint(0, shape.vocab_size, (micro_batch, seq_len), device="cpu")
        tracker = _mem_tracker_cls()()
        tracker.track_external(net, opt, ids)

        def mark(name):
            snap = tracker.get_tracker_snapshot("peak")
            dev = next(iter(snap), None)
            cats = {CATEGORIES.get(getattr(k, "value", k), str(k)): v
                    for k, v in (snap[dev].items() if dev is not None else [])
                    if getattr(k, "value", k) in CATEGORIES}
            cur = tracker.get_tracker_snapshot("current")
            after = {CATEGORIES[getattr(k, "value", k)]: v for d in cur for k, v in cur[d].items()
                     if getattr(k, "value", k) in CATEGORIES}
            phases.append({"name": name, "total_bytes": sum(cats.values()), "by_category": cats,
                           "after_bytes": sum(after.values()), "after_by_category": after})
            # restart peak tracking so that the next phase reports its own peak
            tracker._peak_mem_snap = cur
            tracker._peak_mem = {d: s[_TOTAL_KEY] for d, s in cur.items()}

        with tracker:
            mark("setup")
            out = net(input_ids=ids, labels=ids)
            loss = out.loss
            del out  # trainers drop the outputs (and their bf16 logits) before backward
            mark("forward")
            loss.backward()
            del loss
            mark("backward")
            opt.step()
            mark("step")
            opt.zero_grad(set_to_none=True)
    return {"model": shape.name, "seq_len": seq_len, "micro_batch": micro_batch,
            "gradient_checkpointing": gradient_checkpointing, "lora_rank": lora_rank,
            "lora_target": lora_target, "attn_implementation": attn_implementation,
            "params": n_params, "trainable_params": n_trainable, "phases": phases,
            "seconds": round(time.time() - t0, 1)}
