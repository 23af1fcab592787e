"""Masked diffusion: the denoising loop, transfer schedules, remasking rules, the inter-step
cache."""
from llmnb.diffusion.cache import InterStepCache
from llmnb.diffusion.engine import DiffusionResult, DiffusionStats, denoise, diffuse, mask_id_of
from llmnb.diffusion.errors import DiffusionError
from llmnb.diffusion.options import DiffusionOptions
from llmnb.diffusion.remasking import REMASKING
from llmnb.diffusion.schedulers import SCHEDULERS
from llmnb.diffusion.transfer_schedule import SCHEDULES, transfer_count, transfer_counts
from llmnb.softmax import entropy

__all__ = ["REMASKING", "SCHEDULERS", "SCHEDULES", "DiffusionError", "DiffusionOptions",
           "DiffusionResult", "DiffusionStats", "InterStepCache", "denoise", "diffuse", "entropy",
           "mask_id_of", "transfer_count", "transfer_counts"]
