"""The error tree of the engine.

    CompanionError
    ├── ConfigError            a setting is missing or wrong (user-facing, one line)
    ├── ModelError             the model endpoint failed for good (after retries)
    │   └── ModelOutputError   it answered, but with something unusable
    ├── EmbeddingError         the embedding endpoint failed or gave the wrong dimension
    ├── ToolError              a function call the model made cannot run; fed back to the model
    ├── ContextTooSmall        the fixed part of the prompt cannot fit the context window
    ├── AgentNotFound          no agent for that (tenant, user)
    └── ImportConflict         importing into an agent that already has memory

Every error carries the ids involved; `str(error)` is a sentence fit for an operator.
"""

from __future__ import annotations


class CompanionError(Exception):
    """Base of every error the engine raises on purpose."""


class ConfigError(CompanionError):
    """A deployment setting is missing or invalid."""


class ModelError(CompanionError):
    """The chat model could not be reached or kept failing after retries."""


class ModelOutputError(ModelError):
    """The chat model answered with something the engine cannot use."""


class EmbeddingError(CompanionError):
    """The embedding model failed or returned vectors of the wrong size."""


class ToolError(CompanionError):
    """A function call cannot run; the message is returned to the model verbatim."""


class ContextTooSmall(CompanionError):
    """Even after eviction the prompt would not fit: the window is set too small."""


class AgentNotFound(CompanionError):
    def __init__(self, tenant: str, user: str) -> None:
        super().__init__(f"no agent for user {user!r} in tenant {tenant!r}")
        self.tenant = tenant
        self.user = user


class ImportConflict(CompanionError):
    def __init__(self, agent_id: int, messages: int) -> None:
        super().__init__(
            f"agent {agent_id} already has {messages} messages; reset it first or pass --replace"
        )
        self.agent_id = agent_id
        self.messages = messages
