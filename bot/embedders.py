"""Which embedding model a deployment runs, from COMPANION_EMBEDDING_MODEL and _DIM.

embedding_model(env)    None (unset: the built-in model), `multilingual`, `none`, or the
                        name of a model on the endpoint
embedding_dim(model, dim) the size its vectors have (COMPANION_EMBEDDING_DIM: `dim`)
IN_PROCESS              the models that run in this process, by that setting's value
"""

from __future__ import annotations

from collections.abc import Mapping

from core.local_embedder import LOCAL_DIMENSION, LOCAL_MODEL
from core.multilingual_embedder import MULTILINGUAL, MULTILINGUAL_DIMENSION, MULTILINGUAL_MODEL

# COMPANION_EMBEDDING_MODEL's in-process models: (in a sentence, name, dimensions)
IN_PROCESS: dict[str | None, tuple[str, str, int]] = {
    None: ("the local embedding model", LOCAL_MODEL, LOCAL_DIMENSION),
    MULTILINGUAL: ("the multilingual embedding model", MULTILINGUAL_MODEL, MULTILINGUAL_DIMENSION),
}


def embedding_model(env: Mapping[str, str]) -> str | None:
    """None (unset): the built-in model; `multilingual`, `none` (any case); else the endpoint's."""
    raw = env.get("COMPANION_EMBEDDING_MODEL", "").strip()
    return raw.lower() if raw.lower() in (MULTILINGUAL, "none") else raw or None


def embedding_dim(model: str | None, dim: int | None) -> int:
    """COMPANION_EMBEDDING_DIM for an endpoint model (1536 unless set); 384 for the local one.

    Without COMPANION_EMBEDDING_MODEL the setting is checked but not used: the local model has
    one size, and deployments configured for key words only (an old .env with 1536) must keep
    starting. `companion doctor` says so.
    """
    if model in IN_PROCESS:
        return IN_PROCESS[model][2]
    if model:
        return dim or 1536
    return LOCAL_DIMENSION
