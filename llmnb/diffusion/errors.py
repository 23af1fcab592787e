"""``DiffusionError``: the masked-diffusion layer's one exception type."""
from __future__ import annotations

from llmnb.errors import EXIT_MODEL, LLMNBError


class DiffusionError(LLMNBError):
    """A denoising run that does not fit: a prompt and canvas longer than the context (the
    message names the model file and both lengths). Errors about the model file itself (a
    causal model, no mask token id) stay ``ModelError``."""

    exit_code = EXIT_MODEL   # the exit code these cases had as ModelError: `llmnb --help`
