"""The engine that runs agents: events in, one turn at a time per agent, replies out.

engine.py    `Engine`: submit, drain, converse, upload, resume
outbox.py    `Outbox`: deliver, redeliver, take replies
budgets.py   rate limit and daily token budgets, checked before a turn
tick.py      one scheduler pass: claim due interrupts, run the agents, deliver
"""
