"""Members' data outside the agent's own functions: what members, admins and operators do.

service.py       `Members`: view, settings, forget me, audited admin and operator actions
portability.py   a whole agent as one JSON document, and back
community.py     `Community`: a tenant for its admins (roster, usage, settings, limits)
"""
