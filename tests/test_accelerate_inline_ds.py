"""estimate --config reads an accelerate config's inline deepspeed_config as accelerate 1.15 does
(launch passes each value on as str(), DeepSpeedPlugin converts it back), not as raw YAML."""

import pytest

from ftrecipes.memory import configs

HEAD = "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_machines: 1\nnum_processes: 4\n"


def fields(tmp_path, body):
    path = tmp_path / "accelerate.yaml"
    path.write_text(HEAD + "deepspeed_config:\n" + body)
    return configs.read([str(path)])[1]


@pytest.mark.parametrize("body, want", [
    ("  zero3_init_flag: false\n", {"zero_stage": 2, "offload_optimizer": "none", "offload_param": "none"}),  # DeepSpeedPlugin's default stage
    ("  zero_stage: '3'\n", {"zero_stage": 3}),  # int("3")
    ("  zero_stage: null\n", {"zero_stage": 2}),  # launch passes nothing on for None
    ("  zero_stage: 2\n  offload_optimizer_device: CPU\n", {"offload_optimizer": "cpu"}),  # str(...).lower()
    ("  zero_stage: 3\n  zero3_init_flag: 'no'\n", {"zero3_init": False}),  # str_to_bool
    ("  zero_stage: 3\n  zero3_init_flag: 1\n", {"zero3_init": True}),
])
def test_read_as_accelerate_converts(tmp_path, body, want):
    got = fields(tmp_path, body)
    assert {k: got.get(k) for k in want} == want
