"""The steps of an apply, named once for the agent's journal and the controller's messages."""

from __future__ import annotations

STEPS = ("stage", "verify", "swap", "keep", "cleanup", "stamp")
# What each step after the exchange does, for messages about an apply stopped there.
AFTER_SWAP = {
    "swap": "swapping the new venv in",
    "keep": "keeping the replaced venv as the rollback copy",
    "cleanup": "deleting the older rollback copy",
    "stamp": "writing the no-op stamp",
}
