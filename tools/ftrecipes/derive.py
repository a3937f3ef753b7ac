"""Values the tool computes from the user's values, and the invariants between them.

Batch arithmetic lives here, once, so every file a recipe renders agrees on it
(transformers#27830 and DeepSpeed#6914 are about files that disagreed).
"""

from .errors import UserError


def derive(recipe, values, overrides=()):
    """Return the template context: values + derived values + recipe metadata."""
    v = dict(values)
    nodes = v.get("nodes", 1)
    per_node = v.get("gpus_per_node", 1)
    vllm = v.get("vllm_gpus", 0)

    def bad(message):
        hint = f" (with --set {', '.join(overrides)})" if overrides else ""
        raise UserError(f"{recipe.name}: {message}{hint}")

    if vllm and nodes > 1:
        # TRL's trainer talks to one server from its main process, so more nodes means a node
        # of its own for the server (TRL's and open-r1's multi-node layout) and nodes - 1
        # training nodes with every GPU: torchrun and accelerate start the same number of
        # processes on every node, which a node shared with the server would break.
        if vllm > per_node:
            bad(f"vllm_gpus={vllm} is more than the server node has (gpus_per_node={per_node})")
        train_nodes, train_per_node = nodes - 1, per_node
    else:
        if vllm >= per_node:
            bad(f"vllm_gpus={vllm} leaves no GPU to train on (gpus_per_node={per_node})")
        train_nodes, train_per_node = nodes, per_node - vllm
    world = train_nodes * train_per_node
    tp = v.get("vllm_tensor_parallel_size", 1)
    if vllm and vllm % tp:
        bad(f"vllm_gpus={vllm} is not a whole number of vllm_tensor_parallel_size={tp} replicas")
    micro = v.get("micro_batch_size", 1)
    accum = v.get("grad_accum", 1)
    train_batch = micro * accum * world

    gens = v.get("num_generations")
    if gens and train_batch % gens:
        # TRL groups completions of one prompt inside a generation batch of
        # micro x processes x accumulation (trl#2842); a remainder is refused at start-up.
        bad(
            f"global batch {micro}x{accum}x{world}={train_batch} is not divisible by "
            f"num_generations={gens}"
        )
    stage = v.get("zero_stage")
    if stage is not None and stage < 3 and v.get("offload_param", "none") != "none":
        bad(f"offload_param={v['offload_param']} needs zero_stage=3 (DeepSpeed ignores it at stage {stage})")
    if stage is not None and stage == 0 and v.get("offload_optimizer", "none") != "none":
        bad("offload_optimizer needs zero_stage >= 1")

    ctx = dict(v)
    ctx.update(
        world_size=world,
        train_gpus_per_node=train_per_node,
        train_nodes=train_nodes,
        vllm_node=bool(vllm) and nodes > 1,
        train_batch_size=train_batch,
        # Which devices each process group sees: the server gets the first GPUs.
        vllm_devices=",".join(str(i) for i in range(vllm)),
        train_devices=",".join(str(i) for i in range(0 if nodes > 1 else vllm, per_node)),
        lora=v.get("lora_rank", 0) > 0,
        multi_node=nodes > 1,
        recipe={"name": recipe.name, "version": recipe.version, "label": recipe.label()},
        model_id=recipe.meta["model"]["hf_id"],
    )
    return ctx
