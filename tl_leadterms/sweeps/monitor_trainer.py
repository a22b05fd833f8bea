"""The Hugging Face ``transformers.Trainer`` side of :class:`~.monitor.LeadingTermMonitor`.

``transformers`` is imported only when a Trainer callback is asked for.
"""

import math
from typing import Any

__all__ = ["trainer_callback"]


def _last_loss(state: Any) -> float:
    """The most recent training loss the Trainer logged (NaN before the first log)."""
    for entry in reversed(state.log_history):
        if "loss" in entry:
            return float(entry["loss"])
    return math.nan


def trainer_callback(monitor: Any) -> Any:
    """A ``TrainerCallback`` that calls ``monitor(model, global_step)`` after each step.

    The scores go into ``monitor.history`` and, as one entry per scored step (``{"step": s,
    "cos_W_O": ..., ...}``), into the Trainer's ``state.log_history``; each flag is logged
    through the ``transformers`` logger as a warning.
    """
    from transformers import TrainerCallback
    from transformers.utils import logging

    logger = logging.get_logger("transformers.trainer")

    class LeadingTermCallback(TrainerCallback):
        """Scores the Trainer's model every ``monitor.every`` optimiser steps."""

        def on_step_end(self, args, state, control, model=None, **kwargs):
            step = state.global_step
            if model is None or step % monitor.every:
                return control
            flagged = len(monitor.flags)
            scores = monitor(model, step, _last_loss(state))
            if scores is not None:
                state.log_history.append({**scores, "step": step})
            for flag in monitor.flags[flagged:]:
                logger.warning(
                    f"leading-term monitor: {flag['score']} = {flag['value']:.4f} fell below "
                    f"{flag['threshold']} at step {step} (theorem's step bound "
                    f"{flag['step_bound']:.3g})"
                )
            return control

    return LeadingTermCallback()
