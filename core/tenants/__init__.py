"""A community as a whole, and who may look in: none of it is one member's operation.

tenancy.py   `Tenancy`: a community arriving, leaving (its grace period) and erased
access.py    `Access`: sign-in links to the memory inspector, the sessions they become,
             and `Viewer.may_see`, the one rule of who reads whose memory
audit.py     `record`: one entry of the audit log, in the caller's transaction
"""
