"""Memory model: will a training config fit on the GPUs, and what is the cheapest fix?

Public API: estimate_from_values(values, meta) (recipe mode), estimate_from_config(ds, **setup)
(config mode), estimate(Setup), render_text / render_svg, and cli.register / cli.main.
"""
from .estimate import Result, Setup, estimate
from .inputs import estimate_from_config, estimate_from_values, setup_from_deepspeed, setup_from_values
from .model_states import zero_paper_model_states
from .report import render_svg, render_text

__all__ = [
           "Result",
           "Setup",
           "estimate",
           "estimate_from_config",
           "estimate_from_values",
           "render_svg",
           "render_text",
           "setup_from_deepspeed",
           "setup_from_values",
           "zero_paper_model_states",
]
