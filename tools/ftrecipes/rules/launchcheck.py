"""Launch consistency: processes vs visible GPUs, a generation server's GPUs, ZeRO-3 loading."""

from . import ERROR, rule
from .facts import _flag, commands, devices, ds_configs, launcher_of, world_sizes, zero_stage

# Addresses that name the machine a process runs on (TRL's default vllm_server_host is 0.0.0.0).
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]"}


@rule("processes-vs-devices", ERROR, "more or fewer processes than visible GPUs")
def processes_vs_devices(setup):
    """
    A launcher starts one process per GPU it is told about; `CUDA_VISIBLE_DEVICES` decides
    which GPUs exist for it. When the two counts differ, processes share a GPU (and run out
    of memory) or GPUs sit idle. Compares each training command's CUDA_VISIBLE_DEVICES with
    its process count (accelerate num_processes, torchrun --nproc_per_node,
    NPROC_PER_NODE).
    """
    worlds = world_sizes(setup)
    for cfg, i, cmd in commands(setup):
        kind = launcher_of(cmd)
        if kind in (None, "vllm-serve"):
            continue
        visible = devices(cmd.env.get("CUDA_VISIBLE_DEVICES"))
        if visible is None:
            continue
        mine = [f for f in worlds if f.cfg is cfg and f.path[:2] == ("command", i)] or [f for f in worlds if f.cfg is not cfg]
        for f in mine[:1]:
            if f.nodes != 1:
                continue  # a multi-node count can't be compared with one node's devices
            per_node = f.value
            if per_node != len(visible):
                yield cfg, ("command", i), f"{len(visible)} visible GPUs (CUDA_VISIBLE_DEVICES={cmd.env['CUDA_VISIBLE_DEVICES']}) but {per_node} processes ({f.what})"


@rule("vllm-gpu-overlap", ERROR, "a vLLM generation server shares GPUs with training")
def vllm_overlap(setup):
    """
    `trl vllm-serve` reserves `gpu_memory_utilization` (0.9 by default) of every GPU it runs
    on. Training processes on the same GPUs get the remaining tenth and run out of memory
    at the first generation step. Give the server and the trainer disjoint
    CUDA_VISIBLE_DEVICES (or use TRL's colocate mode with a small
    vllm_gpu_memory_utilization). A trainer pointed at a server on another machine
    (`--vllm_server_host` or `vllm_server_host` / `vllm_server_base_url` naming a host that
    is not this one, as on a dedicated vLLM node) shares no GPU with it.
    """
    servers, trainers = [], []
    for cfg, i, cmd in commands(setup):
        kind = launcher_of(cmd)
        if kind == "vllm-serve":
            servers.append((cfg, i, cmd))
        elif kind is not None and not _remote_server(setup, cmd):
            trainers.append((cfg, i, cmd))
    for scfg, si, scmd in servers:
        sdev = scmd.env.get("CUDA_VISIBLE_DEVICES")
        for tcfg, ti, tcmd in trainers:
            tdev = tcmd.env.get("CUDA_VISIBLE_DEVICES")
            if sdev is None and tdev is None:
                yield scfg, ("command", si), "vLLM server and training both see every GPU; give them disjoint CUDA_VISIBLE_DEVICES"
                continue
            a, b = devices(sdev), devices(tdev)
            if a is not None and b is not None and set(a) & set(b):
                shared = ",".join(sorted(set(a) & set(b)))
                yield scfg, ("command", si), f"vLLM server GPUs {sdev} overlap training GPUs {tdev} (shared: {shared})"
            elif (a is None) != (b is None) and (sdev is None or tdev is None):
                yield scfg, ("command", si), "only one of the vLLM server and the trainer sets CUDA_VISIBLE_DEVICES, so the other sees every GPU"


def _remote_server(setup, cmd):
    """True when the trainer reaches its vLLM server at another machine's address."""
    host = (_flag(cmd, "vllm_server_host", "vllm-server-host") or (None,))[0]
    if host is None:
        for cfg in setup.of("trl"):
            data = cfg.data if isinstance(cfg.data, dict) else {}
            url = data.get("vllm_server_base_url")
            host = str(url).split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0] if url else data.get("vllm_server_host")
            if host is not None:
                break
    return host is not None and str(host) not in _LOCAL_HOSTS


@rule("zero3-loading", ERROR, "ZeRO-3 with low_cpu_mem_usage or device_map loading")
def zero3_loading(setup):
    """
    Under ZeRO-3 the model is built inside `deepspeed.zero.Init`, which partitions each
    parameter as it is created. `low_cpu_mem_usage=True` and `device_map` bypass that path
    (transformers refuses them with ZeRO-3, QwenLM/Qwen#833); drop them under ZeRO-3 and
    keep `low_cpu_mem_usage` for ZeRO-2 and below.
    """
    if not any(zero_stage(ds) == 3 for ds in ds_configs(setup)):
        return
    for cfg in setup.of("trl"):
        kw = cfg.data.get("model_init_kwargs") if isinstance(cfg.data, dict) else None
        if isinstance(kw, dict):
            if kw.get("low_cpu_mem_usage") is True:
                yield cfg, ("model_init_kwargs", "low_cpu_mem_usage"), "low_cpu_mem_usage under ZeRO-3"
            if kw.get("device_map") is not None:
                yield cfg, ("model_init_kwargs", "device_map"), "device_map under ZeRO-3"
    for cfg, i, cmd in commands(setup):
        for j, w in enumerate(cmd.words):
            if w in ("--low_cpu_mem_usage",) and (j + 1 >= len(cmd.words) or cmd.words[j + 1].lower() in ("true", "1")):
                yield cfg, ("command", i, j), "--low_cpu_mem_usage under ZeRO-3"
            if w == "--device_map":
                yield cfg, ("command", i, j), "--device_map under ZeRO-3"
