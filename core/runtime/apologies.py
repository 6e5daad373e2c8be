"""What a member is told when their turn fails: kind, short, and never a server's own words
(those go to the operator's log). "Try again" only where trying again can help: a setup
error will repeat until the operator fixes it.
"""

from __future__ import annotations

from core.errors import ModelError, ModelSetupError

MODEL_DOWN_REPLY = (
    "Sorry, I can't think right now: the model I use is not answering. Your message is "
    "saved; please try again in a little while."
)
MODEL_SETUP_REPLY = (
    "Sorry, I can't answer right now: something in how I am set up needs fixing, and the "
    "people who run me can see what. Your message is saved."
)
INTERNAL_ERROR_REPLY = "Sorry, something went wrong on my side. Your message is saved."


def apology(error: Exception) -> str:
    if isinstance(error, ModelSetupError):
        return MODEL_SETUP_REPLY
    if isinstance(error, ModelError):
        return MODEL_DOWN_REPLY
    return INTERNAL_ERROR_REPLY
