"""Every error Companion raises on purpose, in one tree.

    CompanionError
    ├── ConfigError            a setting is missing or wrong (for the operator, one line)
    │   └── MigrationNeeded    the database waits for a revision only `companion migrate` runs
    ├── ModelError             the model endpoint failed for good (after retries)
    │   ├── ModelOutputError   it answered, but with something unusable
    │   │   └── MalformedOutput   the server could not read the model's output as a call
    │   ├── PromptTooLong      it refused the prompt as longer than its context window
    │   ├── ModelTimeout       no answer within the timeout
    │   ├── ModelUnavailable   down, overloaded or rate-limiting, after retries: it may pass
    │   ├── ImagesRefused      it takes no pictures (a text-only model)
    │   ├── PictureRefused     it could not open this one picture (damaged, or not an image)
    │   └── ModelSetupError    it refuses our requests as it is set up: `fix` says what to do
    ├── EmbeddingError         the embedding endpoint failed
    │   └── WrongDimension     it answered with vectors of another size than the database's
    ├── ToolError              a function call the model made cannot run; fed back to the model
    ├── ContextTooSmall        the fixed part of the prompt cannot fit the context window
    ├── AgentNotFound          no agent for that (tenant, user)
    ├── ClaimLost              another process may have the agent now: the turn stops unwritten
    ├── AgentErased            the agent was erased (reset, forget) meanwhile: its work stops
    ├── NoPlatform             no platform is configured for a tenant: its messages wait
    │   └── NotInstalled       the platform has no installation for that community (any more)
    └── Refused                bad input from a person: the message says why, nothing changed
        ├── EventTooLarge      a message over the size limit
        ├── UploadRejected     a file of the wrong type or size, or unreadable
        ├── BadSetting         a member's setting we cannot use (quiet hours, time zone)
        ├── BadExport          a file that is not a Companion export, or is damaged
        ├── ImportConflict     importing into an agent that already has memory
        ├── BlockRefused       an edit of a working-context block we will not make
        └── LinkRefused        a sign-in link that is tampered with, expired or used

Every error carries the ids involved; `str(error)` is a sentence fit for the person who
caused it (a `Refused` for the member or operator; the others for the operator's log).
Edges catch them: the adapters answer a `Refused` with its text, the CLI prints any
`CompanionError` as one line.
"""

from __future__ import annotations


class CompanionError(Exception):
    """Base of every error the engine raises on purpose."""


class ConfigError(CompanionError):
    """A deployment setting is missing or invalid."""


class MigrationNeeded(ConfigError):
    """The database needs a revision that rewrites tables: `companion migrate` applies it,
    once, before the processes start (a start never rewrites a table by itself)."""

    def __init__(self, current: str, revision: str, title: str) -> None:
        self.current, self.revision = current, revision
        super().__init__(
            f"the database (at revision {current}) needs revision {revision} ({title}), "
            "which rewrites tables: run `companion migrate` once, then start again"
        )


class ModelError(CompanionError):
    """The chat model could not be reached or kept failing after retries."""


class ModelOutputError(ModelError):
    """The chat model answered with something the engine cannot use."""


class MalformedOutput(ModelOutputError):
    """The server could not read what the model wrote as a function call (llama.cpp answers
    HTTP 500 for it): the model is told, as for a bad call."""


class ModelTimeout(ModelError):
    """The model did not answer within the timeout (the generation may still be running)."""


class ModelUnavailable(ModelError):
    """The endpoint is down, overloaded or rate-limiting us, after retries: it may pass."""


class ImagesRefused(ModelError):
    """The model endpoint does not take pictures (image parts): a text-only model."""


class PictureRefused(ModelError):
    """The endpoint could not open a picture it was shown (truncated, damaged, too large to
    decode): the member's picture, not the endpoint's setup."""


class ModelSetupError(ModelError):
    """The endpoint refuses our requests as it is set up (a 4xx that will repeat).

    `fix` is what the operator changes; members are never shown either."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


class PromptTooLong(ModelError):
    """The provider refused the prompt as longer than its context window.

    `prompt_tokens` is the provider's own count of the prompt, when its error said it.
    """

    def __init__(self, message: str, prompt_tokens: int | None = None) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens


class EmbeddingError(CompanionError):
    """The embedding model failed or returned vectors of the wrong size."""


class WrongDimension(EmbeddingError):
    def __init__(self, model: str, got: int, want: int) -> None:
        super().__init__(
            f"embedding model {model!r} returns {got} dimensions but the database holds {want} "
            "(COMPANION_EMBEDDING_DIM); run `companion reembed --dim N` after changing the "
            "embedding model"
        )
        self.got = got
        self.want = want


class ToolError(CompanionError):
    """A function call cannot run; the message is returned to the model verbatim."""


class ContextTooSmall(CompanionError):
    """Even after eviction the prompt would not fit: the window is set too small."""


class AgentNotFound(CompanionError):
    def __init__(self, tenant: str, user: str) -> None:
        super().__init__(f"no agent for user {user!r} in tenant {tenant!r}")
        self.tenant = tenant
        self.user = user


class ClaimLost(CompanionError):
    """The process's claim on an agent is gone (its presence connection was lost); what the
    turn had not yet committed is dropped, and whoever has the agent now goes on."""

    def __init__(self, agent_id: int) -> None:
        super().__init__(f"the claim on agent {agent_id} was lost; the turn stops")
        self.agent_id = agent_id


class AgentErased(CompanionError):
    """The agent was erased (a reset, a forget) while the engine worked for it: nothing more
    of its turn is written, sent or counted (its usage went with it)."""

    def __init__(self, agent_id: int) -> None:
        super().__init__(f"agent {agent_id} was erased meanwhile; its turn stops")
        self.agent_id = agent_id


class NoPlatform(CompanionError):
    """No platform served here reaches this tenant (its key names none, or another
    process serves it): messages to it wait in the outbox."""

    def __init__(self, tenant: str) -> None:
        super().__init__(f"no platform configured for tenant {tenant!r}")
        self.tenant = tenant


class NotInstalled(NoPlatform):
    """The platform serves many communities, but this one has not installed the app (or
    removed it): nothing can be sent there."""

    def __init__(self, tenant: str) -> None:
        CompanionError.__init__(self, f"the app is not installed in {tenant!r}")
        self.tenant = tenant


class Refused(CompanionError):
    """Input a person gave that we will not take; the message tells them why."""


class EventTooLarge(Refused):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"that message has {size:,} characters; the most I can take at once is "
            f"{limit:,}. Send it as a file, or in parts."
        )
        self.size = size
        self.limit = limit


class UploadRejected(Refused):
    """A file the bot will not store; the message is for the member."""


class BadSetting(Refused):
    """A member typed a setting we cannot use; the message says what would work."""


class BadExport(Refused):
    """The file is not a Companion export, or is damaged."""


class ImportConflict(Refused):
    def __init__(self, member: str, messages: int) -> None:
        super().__init__(
            f"{member} already has memory ({messages} messages and passages); reset it first "
            "or pass --replace"
        )
        self.member = member
        self.messages = messages


class BlockRefused(Refused):
    """A person's edit of a working-context block: unknown, over its limit, or stale."""

    def __init__(self, label: str, message: str) -> None:
        super().__init__(message)
        self.label = label


class LinkRefused(Refused):
    """A sign-in link we will not honour; `reason` is bad, expired or used."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
