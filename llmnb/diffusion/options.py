"""The options of one diffusion run: ``llmnb.diffuse``'s keywords as one checked object.

``DiffusionOptions`` holds every choice besides the model and the prompt: the canvas and its
blocks, the transfer schedule, the scheduler (``schedulers.py``) with its parameters, the
remasking rule, the inter-step cache (``cache.py``, ``elastic.py``) with its policy, DPad's
suffix window and the prompt's chat template. ``llmnb.diffuse(model, prompt, **keywords)``
builds one from its keywords and the ``llmnb diffuse`` command from its flags; the loop
(``engine.denoise``) asks it for the scheduler and the cache it names.
"""
from __future__ import annotations

from dataclasses import dataclass

from llmnb.diffusion.cache import InterStepCache
from llmnb.diffusion.elastic import ElasticCache
from llmnb.diffusion.errors import DiffusionError
from llmnb.diffusion.schedulers import Scheduler, make_scheduler
from llmnb.diffusion.transfer_schedule import SCHEDULES
from llmnb.errors import UsageError
from llmnb.model.config import ModelConfig, ModelError
from llmnb.model.model import Model


@dataclass(frozen=True)
class DiffusionOptions:
    """How to denoise: the keywords of ``llmnb.diffuse`` (its docstring says what each does)."""

    gen_length: int = 128                 # masked positions after the prompt
    steps: int = 32                       # denoising steps (a budget; adaptive schedulers differ)
    block_length: int | None = None       # semi-autoregressive blocks (None: one block)
    schedule: str = "cosine"              # how many to commit per step (transfer_schedule.py)
    scheduler: str = "low_confidence"     # ... and the rule that may change it (schedulers.py)
    remasking: str | None = None          # which first (remasking.py; None: the scheduler's)
    temperature: float = 0.0
    seed: int = 42
    entropy_threshold: float = 1.5        # entropy_exit
    threshold: float = 0.9                # Fast-dLLM's threshold rule
    factor: float = 1.0                   # Fast-dLLM's factor rule
    eb_gamma: float = 0.1                 # EB-Sampler
    eb_temperature: tuple[float, float] = (0.8, 0.4)
    klass_confidence: float | None = None  # KLASS (None: the model type's default)
    klass_kl: float | None = None
    klass_history: int = 2
    wino_draft: float = 0.6               # WINO
    wino_verify: float = 0.9
    cache: bool = True                    # the inter-step K/V cache
    cache_policy: str = "diffuse"
    cache_keep_active: int = 0
    cache_refresh: int = 0
    elastic_gamma: float = 0.9            # the elastic policy
    elastic_window: int = 16
    suffix_window: int | None = None      # DPad: positions seen beyond the current block
    chat: bool = False                    # apply the model's chat template to the prompt
    system: str | None = None

    def check(self, model: Model, n_prompt: int) -> tuple[int, int]:
        """Refuse what cannot run on `model` after a prompt of `n_prompt` tokens; return the
        block length and the steps per block."""
        c = model.config
        if c.causal:
            raise ModelError(f"{model.path.name}: a causal ({c.arch}) model cannot denoise: "
                             "expected a diffusion model (llada, dream, or a diffuse file)")
        if self.schedule not in SCHEDULES:
            raise UsageError(f"schedule: expected one of {', '.join(SCHEDULES)}, "
                             f"got {self.schedule!r}")
        if self.gen_length < 1 or self.steps < 1:
            raise UsageError(f"gen_length and steps: expected >= 1, got {self.gen_length} and "
                             f"{self.steps}")
        block = self.gen_length if self.block_length is None else self.block_length
        if block < 1 or self.gen_length % block:
            raise UsageError(f"block_length: expected a divisor of gen_length {self.gen_length}, "
                             f"got {block}")
        n_blocks = self.gen_length // block
        if self.steps % n_blocks:
            raise UsageError(f"steps: expected a multiple of the {n_blocks} blocks, "
                             f"got {self.steps}")
        if n_prompt + self.gen_length > c.n_ctx:
            raise DiffusionError(f"{model.path.name}: prompt ({n_prompt}) + canvas "
                                 f"({self.gen_length}) exceed the context of {c.n_ctx}")
        if self.suffix_window is not None and self.suffix_window < 0:
            raise UsageError(f"suffix_window: expected 0 or more positions, "
                             f"got {self.suffix_window}")
        if self.elastic_window < 1:
            raise UsageError(f"elastic_window: expected 1 or more positions, "
                             f"got {self.elastic_window}")
        return block, self.steps // n_blocks

    def make_scheduler(self, arch: str) -> Scheduler:
        """The scheduler named, its parameters checked (`arch` picks KLASS's defaults), and
        the temperature with it."""
        rule = make_scheduler(self.scheduler, self.entropy_threshold, self.threshold,
                              self.factor, self.eb_gamma, self.eb_temperature,
                              self.klass_confidence, self.klass_kl, self.klass_history,
                              self.wino_draft, self.wino_verify, arch)
        if self.scheduler == "entropy_bound" and self.temperature != 0.0:
            raise UsageError(f"temperature: entropy_bound anneals its own (eb_temperature="
                             f"{self.eb_temperature}); got temperature={self.temperature}")
        return rule

    def make_cache(self, config: ModelConfig, n_positions: int) -> InterStepCache | None:
        """The inter-step cache of a canvas of `n_positions` (None: ``cache=False``)."""
        if not self.cache:
            return None
        if self.cache_policy == "elastic":
            return ElasticCache(config, n_positions, self.elastic_gamma, self.cache_refresh,
                                self.elastic_window)
        return InterStepCache(config, n_positions, self.cache_keep_active, self.cache_refresh,
                              self.cache_policy)


DEFAULT = DiffusionOptions()
