"""Scheduled interrupts: when an agent may open a conversation, and claiming what is due.

    policy.py     pure opener policy: inactivity, jitter, gaps, quiet hours across zones
    planning.py   the schedule in Postgres: after_event, replan, claim_due (SKIP LOCKED)

The pass that runs claimed agents lives above the engine, in `core.runtime.tick`.
"""
