"""What a member is told when their turn fails: kind, short, and never a server's own words
(those go to the operator's log). "Try again" only where trying again can help: a setup
error will repeat until the operator fixes it.
"""

from __future__ import annotations

from core.errors import ModelError, ModelSetupError

# A model that is down: the message waits for it, and the member hears this once per
# outage (core.memory.mind keeps the words: a turn that goes on later is not fooled by it).
from core.memory.mind import WAITING_NOTICE as WAITING_NOTICE  # noqa: E402

# ... unless the outage outlasts COMPANION_OUTAGE_MINUTES.
UNANSWERED_REPLY = (
    "Sorry, I could not answer your message from {when}: the model I think with was "
    "unavailable for too long. Please ask again if it still matters."
)

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
