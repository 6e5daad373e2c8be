"""Members' data outside the agent's own functions.

service.py       `Members`: view, settings, forget me, audited admin and operator actions
portability.py   a whole agent as one JSON document, and back
documents.py     uploaded files into archival passages
reembed.py       re-embedding archival storage
"""
