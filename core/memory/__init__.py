"""The MemGPT memory model: one agent turn, the main context and the storage behind it.

turn.py       one turn: trigger message, then model -> functions until the chain ends
window.py     the main context of a turn, fitted to the window (warn, flush, cut)
prompt.py     pure assembly of the main context (instructions, blocks, summary, FIFO)
queue.py      pure queue-manager decisions: pressure (ok / warn / flush), evict_until
summarize.py  the recursive summary call
tokens.py     offline token counting, calibrated by the provider's usage
tools.py      the seven functions; executor.py runs the model's calls of them
search.py     recall and archival search, paginated
store.py      `AgentStore`: every read and write of one agent's rows
documents.py  uploaded files: checks, text extraction, token chunks into archival storage
reembed.py    re-embedding recall and archival storage; a new vector dimension (DDL)
"""
