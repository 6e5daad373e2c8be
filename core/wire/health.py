"""What the process has learned about its model endpoint, told to the operator once.

    refused(error)                 a setup error (a 4xx that will repeat): logged once per
                                   problem with its fix, shown by /readyz until a request
                                   goes through again
    answered()                     a request went through
    saw_prompt(ours, schemas, theirs)   the server's count of a prompt sent with the
                                   function schemas, against ours: far below it, with about
                                   the schemas missing, means the server dropped them
    saw_turn(called)               whether a member's turn called any function
    state()                        (state, detail) for /readyz: ok, refused, no_functions

Without functions the agent cannot save, search or page: the product silently stops being
MemGPT. Either sign is logged once per process at WARNING, with what to change.
"""

from __future__ import annotations

import logging

from core.errors import ModelSetupError

log = logging.getLogger("companion.model")

DROPPED_SIGNS = 3  # prompts in a row whose server count says the schemas were dropped
SILENT_TURNS = 8  # members' turns in a row without a single function call
TOOLS_FIX = (
    "llama.cpp: start llama-server with --jinja and a chat template that renders tools "
    "(--chat-template-file); Ollama: a model with the tools capability; vLLM: "
    "--enable-auto-tool-choice with the model's --tool-call-parser. `companion doctor` "
    "checks the endpoint"
)


class WireHealth:
    def __init__(self) -> None:
        self.setup_error: ModelSetupError | None = None
        self.warned: set[str] = set()
        self.dropped_signs = 0
        self.silent_turns = 0
        self.tools_suspect: str | None = None

    def refused(self, error: ModelSetupError) -> None:
        self.setup_error = error
        if self._once(f"refused:{error}"):
            log.error("%s; to fix: %s", error, error.fix)

    def answered(self) -> None:
        self.setup_error = None

    def saw_prompt(self, ours: int, schemas: int, theirs: int | None) -> None:
        """`ours`: our count of a prompt with `schemas` tokens of function schemas;
        `theirs`: the server's. Tokenizers differ by a third either way, a missing
        half of the prompt does not."""
        if not theirs or not schemas or ours <= schemas:
            return
        dropped = theirs < 0.7 * ours and theirs < 1.3 * (ours - schemas)
        self.dropped_signs = self.dropped_signs + 1 if dropped else 0
        if self.dropped_signs >= DROPPED_SIGNS:
            detail = (
                f"the model endpoint seems to drop the function schemas: it counted "
                f"{theirs} prompt tokens where Companion counts {ours}, {schemas} of them "
                "the schemas"
            )
            self._suspect("dropped", detail)

    def saw_turn(self, called: bool) -> None:
        self.silent_turns = 0 if called else self.silent_turns + 1
        if called:
            self.tools_suspect = None
        elif self.silent_turns >= SILENT_TURNS:
            detail = f"the model called no function in the last {self.silent_turns} turns"
            self._suspect("silent", detail)

    def state(self) -> tuple[str, str]:
        if self.setup_error is not None:
            return "refused", f"{self.setup_error}; to fix: {self.setup_error.fix}"
        if self.tools_suspect is not None:
            return "no_functions", f"{self.tools_suspect}; to fix: {TOOLS_FIX}"
        return "ok", "answering"

    def _suspect(self, kind: str, detail: str) -> None:
        self.tools_suspect = detail
        if self._once(kind):
            log.warning(
                "%s: without functions Companion cannot save or search memory; to fix: %s",
                detail,
                TOOLS_FIX,
            )

    def _once(self, key: str) -> bool:
        if key in self.warned:
            return False
        self.warned.add(key)
        return True
