"""`companion eval`: measure a deployment's memory on the MemGPT paper's tasks.

runner.py     the command: a throwaway schema, one task, a JSON report and a table
locomo.py     conversations in LoCoMo's format imported as an agent's past
recall.py     locomo-recall: evidence recall of conversation_search, by category
answers.py    locomo-qa and dmr: the agent answers from memory, an LLM judge scores
nested_kv.py  nested-kv: key-value lookups (nested up to 6 levels) in archival memory
openers.py    openers: is a conversation opener grounded in the working context?
"""
